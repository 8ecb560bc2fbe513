"""What a Megatron log means without printing it: a loss it omitted, tokens from
samples, the dtype its arguments, banner or loss scale give (see `megatron`)."""

from __future__ import annotations

import math
import re

from stabilitycli.core import aliases
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.dtype import dtype_from

NOTE_LIMIT = 5  # iterations named one by one in a note; the rest are counted
# DeepSpeed's config dump names its switches apart from Megatron's arguments
_DEEPSPEED_SWITCHES = ("fp16_enabled", "bfloat16_enabled", "bf16_enabled")


def _loss_key(records: list[dict]) -> str | None:
    for rec in records:
        for key in rec:
            if not key.startswith("_") and (aliases.canonical_for(key) or ("", 0))[0] == "loss":
                return key
    return None


_MEGATRON_LOSS = "lm loss"  # GPT, BERT and T5 in Megatron-LM and its forks


def _nan_from_the_start(records: list[dict], source: SourceInfo) -> str | None:
    """`lm loss` when no record has it but one shows the NaN another way, else None.

    Megatron drops the field whenever the interval mean is NaN, so a run NaN
    from its first logged iteration never prints it; its grad norm or its
    NaN-iteration counter still does. Without such a sign, the loss may just
    be named otherwise in this fork, and nothing is read as NaN.
    """
    for rec in records:
        grad = rec.get("grad norm")
        nan_iterations = rec.get("number of nan iterations")
        if grad is not None and not math.isfinite(grad):
            sign = f"grad norm {grad}"
        elif nan_iterations is not None and nan_iterations != 0:
            sign = f"number of nan iterations {nan_iterations:g}"
        else:
            continue
        source.notes.append(
            f"no iteration line has `{_MEGATRON_LOSS}`, and iteration {rec['_step']} shows "
            f"{sign}: the loss is read as NaN where the field is missing"
        )
        return _MEGATRON_LOSS
    return None


CUT = "_cut"  # on a cut record (`megatron._cut_record`): the last whole field's key


def _printed_after(records: list[dict], key: str) -> set[str]:
    """The fields a whole record prints after the loss: a cut record holding one of them was
    cut past the loss, so its missing loss was omitted, not cut off."""
    for rec in records:
        if key in rec and CUT not in rec:
            keys = [k for k in rec if not k.startswith("_")]
            return set(keys[keys.index(key) + 1 :])
    return set()


def _cut_before_loss(records: list[dict], key: str, source: SourceInfo) -> None:
    """A cut record without the loss whose cut comes before where the loss is printed: its
    loss is unknown (left empty), said in a note; marks are removed either way."""
    after = _printed_after(records, key)
    for rec in records:
        last = rec.pop(CUT, None)
        if last is None or key in rec:
            continue
        if any(k in after for k in rec):
            source.notes.append(
                f"iteration {rec['_step']}: the record is cut after `{last}`, which Megatron "
                f"prints after `{key}`: the loss was omitted before the cut, not cut off"
            )
            continue
        rec[CUT_UNKNOWN] = True
        source.notes.append(
            f"iteration {rec['_step']}: the record is cut after `{last}`, before where `{key}` "
            "is printed: its loss is unknown (left empty, not NaN); its other fields are kept"
        )


CUT_UNKNOWN = "_loss_cut_off"


def missing_loss(records: list[dict], args: dict[str, str], source: SourceInfo) -> None:
    """A record without the loss while others have it: NaN, or empty if all was skipped
    or if the record was cut before its loss."""
    key = _loss_key(records) or _nan_from_the_start(records, source)
    if key is None:
        for rec in records:
            rec.pop(CUT, None)
        return
    _cut_before_loss(records, key, source)
    nan_at: list[int] = []
    skipped_at: list[int] = []
    prev_step: int | None = None
    for rec in records:
        step = rec["_step"]
        if prev_step is not None and prev_step < step:
            span = step - prev_step
        elif re.fullmatch(f"[0-9]{{1,{MAX_SEQ_LENGTH_DIGITS}}}", args.get("log_interval", "")):
            span = int(args["log_interval"])
        else:
            span = step  # the first record of a run that started at 0
        prev_step = step
        if rec.pop(CUT_UNKNOWN, False) or key in rec:
            continue
        skipped = rec.get("number of skipped iterations")
        if skipped is not None and math.isfinite(skipped) and span > 0 and skipped >= span:
            skipped_at.append(step)
            continue
        rec[key] = float("nan")
        nan_at.append(step)
    for steps, why in (
        (nan_at, f"no `{key}` field (Megatron omits a non-finite interval mean); read as NaN"),
        (
            skipped_at,
            (
                f"no `{key}` field: every iteration of the interval was skipped, so there "
                "is no mean; left empty, not NaN"
            ),
        ),
    ):
        for step in steps[:NOTE_LIMIT]:
            source.notes.append(f"iteration {step}: {why}")
        if len(steps) > NOTE_LIMIT:
            source.notes.append(f"... and {len(steps) - NOTE_LIMIT} more iterations with {why}")


MAX_SEQ_LENGTH_DIGITS = 9  # up to 999,999,999 tokens a sample: far above any real context


def tokens_and_time(records: list[dict], args: dict[str, str], source: SourceInfo) -> None:
    if any("consumed tokens" in r for r in records):
        return
    seq = args.get("seq_length", "")
    if not any("consumed samples" in r for r in records) or not seq:
        return
    # a damaged dump can hold a 400-digit "length" (or a '²', which isdigit() accepts and
    # int() refuses): no product with it is a token count
    if not re.fullmatch(f"[0-9]{{1,{MAX_SEQ_LENGTH_DIGITS}}}", seq):
        source.notes.append(
            f"seq_length {seq[:20]!r}{'...' if len(seq) > 20 else ''} in the argument dump is "
            "not a sequence length: tokens not derived from consumed samples"
        )
        return
    for rec in records:
        if "consumed samples" in rec:
            rec["consumed tokens"] = rec["consumed samples"] * int(seq)
    source.notes.append(f"tokens = consumed samples x seq_length {seq} (from the argument dump)")


def stated_dtype(
    args: dict[str, str],
    rows: dict[str, int],
    stated: dict[str, tuple[str, str]],
    source: SourceInfo,
) -> None:
    """The dtype the log states, strongest first (see the module notes)."""
    if source.dtype is not None:
        return

    def settings(label: str, names: tuple[str, ...]) -> list[tuple[str, dict[str, str]]]:
        # one table per line, so that the origin names the line that decided
        return [(f"{label} (line {rows[n]})", {n: args[n]}) for n in names if n in args]

    found = dtype_from(*settings("Megatron argument dump", ("fp16", "bf16")))
    found = found or stated.get("banner")
    found = found or dtype_from(*settings("DeepSpeed config dump", _DEEPSPEED_SWITCHES))
    found = found or stated.get("command")
    if found is not None:
        source.dtype, source.dtype_origin = found


def dtype_from_scale(records: list[dict], events: list, source: SourceInfo) -> None:
    """fp16 when nothing stated a dtype but the loss scale shows fp16 scaling at work.

    A scale other than 1 is one only fp16 training applies (Megatron prints 1.0
    for bf16 and fp32); a constant 1.0 is left unknown, not guessed.
    """
    if source.dtype is not None:
        return
    scales = [r["loss scale"] for r in records if "loss scale" in r]
    scales = [s for s in scales if math.isfinite(s)]
    if len(set(scales)) > 1:
        source.dtype = "fp16"
        source.dtype_origin = (
            f"inferred: the loss scale moved ({len(set(scales))} values between "
            f"{min(scales):g} and {max(scales):g}), as only fp16 loss scaling does"
        )
    elif scales and scales[0] != 1.0:
        source.dtype = "fp16"
        source.dtype_origin = (
            f"inferred: a constant loss scale of {scales[0]:g}, which only fp16 training applies"
        )
    elif events:
        source.dtype = "fp16"
        source.dtype_origin = "inferred: DeepSpeed fp16 loss-scale messages"


def reading_notes(scan, n_lines: int, source: SourceInfo) -> None:
    """What the loss means, the fields skipped, and how much of the log was records
    (`scan`: the reader's pass over the log)."""
    interval = scan.args.get("log_interval")
    source.notes.append(
        "Megatron's `lm loss` is the mean over the iterations of each log interval"
        + (f" (log_interval {interval})" if interval else "")
        + ", skipped iterations excluded; a one-iteration spike is diluted by the interval"
    )
    for key, count in sorted(scan.layouts.skipped.items(), key=lambda kv: -kv[1])[:5]:
        source.notes.append(
            f"field {key!r} skipped on {count} record(s): its value is not a number"
        )
    source.lines_skipped = n_lines - scan.record_lines
    source.notes.append(
        f"{scan.record_lines} of {n_lines} lines are records; {source.lines_skipped} other "
        "lines (banners, argument dumps, timers) skipped as text"
    )
    if scan.memory_lines:
        source.notes.append(
            f"{scan.memory_lines} `[Rank N] memory (MB)` lines not read "
            "(memory is not a stability metric)"
        )
