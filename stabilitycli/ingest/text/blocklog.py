"""Records that span lines: a header carrying the step, then one indented `key=value` or
`key: value` line per metric (`blocklog`).

    2024-02-05 10:01:02.345  host-7:0  olmo.train:966  INFO  [step=1/739328,epoch=0]
        optim/total_grad_norm=231.7
        train/CrossEntropyLoss=12.18
        train/Perplexity=195,153

is OLMo's trainer (one `log.info` with the metrics joined by newlines, so only the
header has the logging prefix); OLMo-core prints `[step=N/M,epoch=E,eta=...]` the same
way, and Composer / LLM Foundry's console logger prints `[batch=N/M]:` (or
`[epoch=E][batch=N/M]:` for a run measured in epochs) followed by tab-indented
`Train loss/train/total: 2.5000` lines, and `[Eval batch=N/M] ...:` with `Eval ...` lines;
OLMo prints an evaluation under the evaluator's label (a header line without a step) with
`eval/<label>/CrossEntropyLoss=...` lines.

Only the indented lines that follow a header are values: the host and logger names
in the header's prefix are never read as metrics, and a config dump's indented lines
(not after a header) are text. Keys keep their full path (`train/CrossEntropyLoss`,
`loss/train/total`; Composer's `Train ` / `Eval ` prefix taken off). A value may be
written with thousands separators (OLMo's `format_float` prints `195,153`): read as a
number here only, inside such a value field. The total M of the header is the planned
length, kept in a note. An eval record has the step of the training record before it.
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import textlog as tl

NAME = "blocklog"

# `[step=N/M,...]` (OLMo, OLMo-core), `[batch=N/M]:`, `[epoch=E][batch=N/M]:` (Composer);
# the header ends its line (a mention of `[step=3]` inside a sentence is not one)
_HEADER = (
    r"(?:\[epoch=(?P<epoch>\d+)\])?\[(?P<unit>step|batch|iteration|iter|sample|token)="
    r"(?P<n>\d+)(?:/(?P<m>\d+|\?\?\?))?(?:,[^\]\n]*)?\]:?[ \t]*$"
)
_EVAL_HEADER = r"\[Eval batch=\d+/\d+\][^\n]*:[ \t]*$"
# an indented `key=value` / `key: value` line; a Markdown quote marker may come first
_VALUE = (
    r"^(?:>+ ?)?[ \t]+(?:(?:Train|Eval) )?(?P<key>[^\s=:][^=\t]*?)[ \t]*(?:=|:[ \t])[ \t]*"
    r"(?P<value>\S+)[ \t]*$"
)
_NUMBER = r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d*)?(?:[eE][-+]?\d+)?$"
_NON_FINITE = r"^[-+]?(?:nan|inf|infinity)$"
_SNIFF = re.compile(
    r"(?m)(?:\[(?:step|batch|iteration|iter|sample|token)=\d+(?:/(?:\d+|\?\?\?))?[^\]\n]*\]"
    r":?[ \t]*\r?\n(?:>+ ?)?[ \t]+[^\s=:][^=\n]*?(?:=|:[ \t])[ \t]*[-+.\dnNiI])"
)


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_generic_text_log(path, head):
        return False
    return _SNIFF.search(tl.peek(path, head)) is not None


def read(path: Path, options: ReadOptions):
    import polars as pl

    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    lines, cut, _too_long = tl.read_log(path, source, options.limits)
    lines = tl.drop_cut_line(lines, cut, source)
    text = pl.DataFrame({"text": lines}, schema={"text": pl.String}).with_row_index(
        "_row", offset=1
    )
    text = text.with_columns(
        pl.col("_row").cast(pl.Int64),
        pl.col("text").str.replace_all(r"\x1b\[[0-9;?]*[A-Za-z]", "").str.strip_chars_end("\r"),
    )
    header = pl.col("text").str.extract_groups(_HEADER)
    value = pl.col("text").str.extract_groups(_VALUE)
    text = text.with_columns(
        header.struct.field("n").cast(pl.Int64, strict=False).alias("_n"),
        header.struct.field("m").alias("_m"),
        header.struct.field("epoch").cast(pl.Int64, strict=False).alias("_epoch"),
        pl.col("text").str.contains(_EVAL_HEADER).alias("_eval"),
        value.struct.field("key").alias("key"),
        value.struct.field("value").alias("value"),
    )
    # OLMo prints an evaluator's metrics under its label (`v3-small-c4_en-validation`, after
    # the logging prefix), not under a step: a line of no value with `eval/...` values below
    olmo_eval = pl.col("key").is_null() & pl.col("key").shift(-1).str.starts_with("eval/")
    text = text.with_columns(pl.col("_eval") | olmo_eval.fill_null(False))
    is_header = pl.col("_n").is_not_null() | pl.col("_eval")
    # a value line belongs to the header above it, unless another line came between
    text = text.with_columns(
        pl.when(is_header)
        .then(pl.col("_row"))
        .when(pl.col("key").is_null())
        .then(pl.lit(-1, pl.Int64))
        .otherwise(None)
        .forward_fill()
        .alias("_block")
    )
    headers = _header_steps(text.filter(is_header), source)
    evals = text.filter(pl.col("_eval")).height
    if evals:
        source.notes.append(
            f"{evals} evaluation record(s) print no step: each is placed at the step of the "
            "training record before it"
        )
    values = text.filter(pl.col("key").is_not_null() & ~is_header & (pl.col("_block") > 0)).select(
        "_block", "_row", pl.col("key").str.strip_chars(), "value"
    )
    if values.height == 0:
        raise StabInputError(
            source.path,
            "no multi-line record found (a `[step=N/M]` or `[batch=N/M]:` header followed by "
            "indented `key=value` / `key: value` lines)",
        )
    rows = _numbers(values, source)
    wide = rows.pivot(on="key", index="_block", values="number", aggregate_function="first")
    raw = headers.join(wide, left_on="_row", right_on="_block", how="inner")
    source.lines_skipped = len(lines) - raw.height - values.height
    units = set(text.filter(pl.col("_n").is_not_null())["text"].str.extract(r"\[(\w+)=\d"))
    writer = "OLMo / OLMo-core" if units == {"step"} else "Composer / LLM Foundry"
    source.notes.append(
        f"read as multi-line records ({writer} console format): a header with the step, then "
        f"one indented value per line; {raw.height} record(s) of {values.height} value line(s)"
    )
    return tl.finish_records(raw.sort("_row"), source, options.metric_overrides)


def _header_steps(headers, source: SourceInfo):
    """Each header's `_row` and step; the planned length M said in a note."""
    import polars as pl

    # Composer's `[epoch=E][batch=N/M]` counts batches within epoch E (from 1)
    in_epoch = pl.col("_epoch").is_not_null() & pl.col("_m").str.contains(r"^\d+$")
    step = (
        pl.when(in_epoch)
        .then((pl.col("_epoch") - 1) * pl.col("_m").cast(pl.Int64, strict=False) + pl.col("_n"))
        .otherwise(pl.col("_n"))
    )
    # an eval record has the step of the training record before it
    headers = headers.with_columns(step.forward_fill().alias("step"))
    if headers["_epoch"].is_not_null().any():
        source.notes.append(
            "Composer's `[epoch=E][batch=N/M]` counts batches within an epoch: "
            "the step is (E-1)*M + N"
        )
    else:
        planned = (
            headers["_m"]
            .drop_nulls()
            .filter(headers["_m"].drop_nulls() != "???")
            .unique(maintain_order=True)
        )
        if len(planned):
            source.notes.append(
                "the planned length M of the headers' N/M: " + ", ".join(planned.head(3).to_list())
            )
    no_step = headers.filter(pl.col("step").is_null())
    for row in no_step["_row"].to_list():
        source.reject(row, "eval record before any training record (no step to place it at)")
    return headers.filter(pl.col("step").is_not_null()).select("_row", "step")


def _numbers(values, source: SourceInfo):
    """`number` of each value line: thousands separators read here, inside a value field;
    a value that is no number (`1h2m`, `True`) is no metric and skipped."""
    import polars as pl

    low = pl.col("value").str.to_lowercase().str.strip_chars_end(",")
    numeric = low.str.contains(_NUMBER) & low.str.contains(r"\d") | low.str.contains(_NON_FINITE)
    skipped = values.filter(~numeric)
    if skipped.height:
        keys = ", ".join(repr(k) for k in skipped["key"].unique(maintain_order=True).head(5))
        source.notes.append(f"values that are not numbers skipped (keys: {keys})")
    return values.filter(numeric).select(
        "_block",
        "key",
        low.str.replace_all(",", "").cast(pl.Float64, strict=False).alias("number"),
    )
