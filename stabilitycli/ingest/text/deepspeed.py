"""DeepSpeed stdout logs (DeepSpeed-Chat and any script trained by a DeepSpeed engine).

What is read, line by line (everything else - banners, config dumps,
launcher chatter - is not a row):

* `step=N, skipped=K, lr=[...]` progress lines (every `steps_per_print`):
  `lr` is the first param group's; `skipped=` is DeepSpeed's CUMULATIVE count,
  turned here into the number of skipped steps since the previous progress
  line so that `skipped_steps` means the same as Megatron's per-interval
  counter. When two engines log the same step (DeepSpeed-Chat's RLHF step:
  actor, then critic), the second one's values are kept as `engine2/...`;
* the timer line `epoch=E/micro_step=M/global_step=N, ..., CurrSamplesPerSec=X`;
* fp16 loss-scale messages (overflow / skipped step, scale growth), turned
  into one event per overflow by `_dsmessages` (see there for how a message
  without a step gets one);
* DeepSpeed-Chat's own lines: the PPO step line `epoch: 0|step: N|ppo_ep: 1|
  act_loss: ...|cri_loss: ...` (kept at its `step` as printed), `average reward score: X`,
  evaluation lines (`ppl: X`, `chosen_last_scores ...: X, acc ...: Y`,
  `chosen: X, rejected: Y, loss: Z`), `Epoch 1/1 with loss X` (a mean over the
  epoch, kept as `epoch_mean_loss`, never as a per-step loss), and the
  per-micro-batch throughput line `Model Parameters: ..., TFLOPs: X,
  Samples/sec: Y, ...` (averaged over the micro-batches before each step line).

Steps are kept as printed, with one exception said in a note: the PPO line counts
steps from 0 and the engines' `step=` / `global_step=` lines from 1 (engine step N
is printed just before PPO step N-1), so in a log with both the engine lines are
placed at N-1; two numberings in one step column would run backwards at every
progress line, which `finalize` would read as a resumed run.

Lines printed after an evaluation or a PPO step (reward, eval, epoch loss)
belong to the step before them; messages printed while a step runs (overflow,
throughput) belong to the step line after them.
"""

from __future__ import annotations

import re
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.dtype import dtype_from
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.text import _dsmessages as dsm
from stabilitycli.ingest.text import _dsplace as dsp
from stabilitycli.ingest.text import textlog as tl

NAME = "deepspeed"

_PROGRESS = re.compile(r"\bstep=(\d+),\s*skipped=(\d+),\s*lr=\[([^\]]*)\]")
_TIMER = re.compile(
    r"global_step=(\d+),\s*RunningAvgSamplesPerSec=(\S+?),\s*CurrSamplesPerSec=(\S+?),"
)
_PPO = re.compile(r"epoch:\s*(\d+)\s*\|\s*step:\s*(\d+)\s*\|(.*)$")
_REWARD = re.compile(r"average reward score:\s*(\S+)")
_PPL = re.compile(r"^\s*ppl:\s*(\S+)\s*$")
_RM_EVAL = re.compile(
    r"chosen_last_scores \(higher is better\)\s*:\s*(\S+?),\s*acc \(higher is better\)\s*:\s*(\S+)"
)
_DPO_EVAL = re.compile(r"^\s*chosen:\s*(\S+?),\s*rejected:\s*(\S+?),\s*loss:\s*(\S+)\s*$")
_EPOCH_LOSS = re.compile(r"^\s*Epoch\s+(\d+)/(\d+) with loss\s+(\S+)\s*$")
_THROUGHPUT = re.compile(r"Model Parameters:.*?TFLOPs:\s*(\S+?),\s*Samples/sec:\s*(\S+?),")
_DTYPE = re.compile(r"\b(fp16_enabled|bfloat16_enabled|bf16_enabled)\s*\.+\s*(True|False)\b")

_SNIFF = re.compile(
    r"\bstep=\d+,\s*skipped=\d+|OVERFLOW!\s*Rank\s+\d+|Grad overflow on iteration"
    r"|fp16 dynamic loss scale overflow|epoch:\s*\d+\|step:\s*\d+\|"
    r"|global_step=\d+,\s*RunningAvgSamplesPerSec"
)
# lines worth a regex at all (a cheap substring test first keeps big logs fast)
_CANDIDATE = (
    "step",
    "verflow",
    "loss scale",
    "reward",
    "ppl:",
    "chosen",
    "with loss",
    "TFLOPs",
    "_enabled",
)


def sniff(path: Path, head: bytes) -> bool:
    if not tl.is_text_log(path, head):
        return False
    return _SNIFF.search(tl.peek(path, head)) is not None


def read(path: Path, options: ReadOptions):
    source = SourceInfo(path=str(path), format=NAME, run=path.stem or None)
    lines, cut, _too_long = tl.read_log(path, source, options.limits)
    return parse_lines(lines, cut, source, options)


def parse_lines(lines: list[str], cut: bool, source: SourceInfo, options: ReadOptions):
    import polars as pl

    from stabilitycli.frame import finalize

    whole = _whole_ppo_fields(lines[-1]) if cut and lines else None
    if whole is not None:  # a PPO step line cut after a `|`: the fields before it are whole
        lines[-1], last = whole
        source.warnings.append(
            tl.cut_kept_warning(len(lines), "the last PPO step line", last, tl.NO_FINAL_NEWLINE)
        )
    else:
        lines = tl.drop_cut_line(lines, cut, source)
    scan = _Scan(source)
    for index, line in enumerate(lines):
        if not any(token in line for token in _CANDIDATE):
            continue
        scan.line(index + 1, line)
    if source.rows_rejected:
        first = source.rejections[0]
        source.warnings.append(
            f"{source.rows_rejected} line(s) could not be read; first at line {first.line}: "
            f"{first.reason}"
        )
    if not (scan.records or scan.after or scan.before or scan.mentions):
        raise StabInputError(
            source.path, "no DeepSpeed progress, loss-scale or DeepSpeed-Chat lines found"
        )
    events, event_rows = scan.place_steps()
    source.notes.extend(dsm.summary(scan.mentions, events, 1 - scan.shifted))
    source.line_order_steps.update(dsm.order_numbered(events))
    _note_placed(scan, source)
    _note_skipped(scan, events, source)
    _read_dtype(scan, source)
    rows = scan.records + scan.after + scan.before + event_rows
    raw = pl.DataFrame(rows, infer_schema_length=None).rename({"_step": "step"})
    source.rows_read = raw.height + source.rows_rejected
    return finalize(raw, source, step_key="step", overrides=options.metric_overrides)


# lines that carry no step, each (pattern, (key, group) of each value, printed after its step)
_STEPLESS: tuple[tuple[re.Pattern[str], tuple[tuple[str, int], ...], bool], ...] = (
    (_REWARD, (("reward_score", 1),), True),
    (_PPL, (("eval_ppl", 1),), True),
    (_RM_EVAL, (("eval_chosen_score", 1), ("eval_reward_acc", 2)), True),
    (
        _DPO_EVAL,
        (("eval_chosen_reward", 1), ("eval_rejected_reward", 2), ("eval_loss", 3)),
        True,
    ),
    (_EPOCH_LOSS, (("epoch_mean_loss", 3),), True),
    (_THROUGHPUT, (("TFLOPs", 1), ("Samples/sec", 2)), False),
)


class _Scan:
    """What the lines of one log have given so far: rows, steps and loss-scale messages."""

    def __init__(self, source: SourceInfo) -> None:
        self.source = source
        self.records: list[dict] = []  # rows with their own step
        self.after: list[dict] = []  # rows that belong to the step line before them
        self.before: list[dict] = []  # rows that belong to the step line after them
        self.anchors: list[dsm.Anchor] = []
        self.mentions: list[dsm.Mention] = []
        self.state: dict = {}  # what `dsm.scan_line` carries from one line to the next
        # (step, engine index) of the last progress line
        self.engine_step: tuple[int, int] | None = None
        # each engine's cumulative `skipped=` on its last progress line
        self.skipped_so_far: dict[int, int] = {}
        self.switches: dict[str, tuple[str, int]] = {}  # config-dump switch -> (value, line)
        self.engine_lines: list[int] = []  # indexes in `records` of `step=` / timer lines
        self.ppo_lines = 0
        self.shifted = 0  # 1 when the engine lines were placed at the PPO numbering

    def line(self, row: int, line: str) -> None:
        if "_enabled" in line and (m := _DTYPE.search(line)):
            self.switches.setdefault(m.group(1), (m.group(2), row))
        if "verflow" in line or "loss scale" in line:
            self.mentions.extend(dsm.scan_line(row, line, tl.timestamp(line), self.state))
        if (m := _PROGRESS.search(line)) is not None:
            self._progress(row, line, m)
        elif (m := _TIMER.search(line)) is not None:
            self._timer(row, line, m)
        elif (m := _PPO.search(line)) is not None:
            self._ppo(row, line, m)
        else:
            self._stepless(row, line)

    def _stepped(self, row: int, line: str, rec: dict) -> None:
        self.records.append(rec)
        self.anchors.append(dsm.Anchor(row, rec["_step"], tl.timestamp(line)))

    def _progress(self, row: int, line: str, m: re.Match[str]) -> None:
        """`step=N, skipped=K, lr=[...]`: `skipped` made per interval, a second engine's
        line of the same step kept under `engine2/`."""
        step, skipped = tl.whole(m.group(1)), tl.whole(m.group(2))
        if step is None or skipped is None:
            self.source.reject(row, tl.STEP_RANGE_REASON)
            return
        last = self.engine_step
        engine = last[1] + 1 if last and last[0] == step else 1
        self.engine_step = (step, engine)
        prefix = "" if engine == 1 else f"engine{engine}/"
        lrs = [x for x in m.group(3).split(",") if x.strip()]
        before = self.skipped_so_far.get(engine, 0)
        rec: dict = {  # one row: numbers by key (None where a value could not be read)
            "_row": row,
            "_step": step,
            f"{prefix}skipped": float(skipped - before) if skipped >= before else float(skipped),
        }
        self.skipped_so_far[engine] = skipped
        if lrs:
            rec[f"{prefix}lr"] = _num(lrs[0])
        self.engine_lines.append(len(self.records))
        self._stepped(row, line, rec)

    def _timer(self, row: int, line: str, m: re.Match[str]) -> None:
        step = tl.whole(m.group(1))
        if step is None:
            self.source.reject(row, tl.STEP_RANGE_REASON)
            return
        self.engine_lines.append(len(self.records))
        self._stepped(
            row, line, {"_row": row, "_step": step, "CurrSamplesPerSec": _num(m.group(3))}
        )

    def _ppo(self, row: int, line: str, m: re.Match[str]) -> None:
        ppo_step = tl.whole(m.group(2))
        if ppo_step is None or ppo_step == tl.INT64_MAX:
            self.source.reject(row, tl.STEP_RANGE_REASON)
            return
        fields, clash = _ppo_fields(m.group(3))
        if clash is not None:
            self.source.reject(row, f"field {clash[:30]!r} given twice on a PPO step line")
            return
        rec = _numbers(row, fields, self.source)
        if rec is not None:
            rec["_step"] = ppo_step
            self.ppo_lines += 1
            self._stepped(row, line, rec)

    def _stepless(self, row: int, line: str) -> None:
        for pattern, groups, printed_after in _STEPLESS:
            if (m := pattern.search(line)) is not None:
                rec = _numbers(row, {key: m.group(g) for key, g in groups}, self.source)
                if rec is not None:
                    (self.after if printed_after else self.before).append(rec)
                return

    def place_steps(self) -> tuple[list[dsm.Event], list[dict]]:
        """Steps for the rows and messages that have none; the overflow events and their rows."""
        self._engine_to_ppo_steps()
        anchors = self.anchors
        anchors.sort(key=lambda a: a.row)
        dsp.attach(self.after, anchors, self.source, later=False)
        dsp.attach(self.before, anchors, self.source, later=True)
        events = dsm.place(self.mentions, anchors)
        event_rows = dsm.frame_rows(events, "loss_scale")
        fixed = [(a.row, a.step) for a in anchors] + [(r["_row"], r["_step"]) for r in event_rows]
        dsp.make_monotone(self.after + self.before, fixed)
        dsp.average_throughput(self.before)
        return events, event_rows

    def _engine_to_ppo_steps(self) -> None:
        """In a log with PPO lines, engine step N is placed at N-1 (the PPO line's numbering),
        and a note says so."""
        if not (self.ppo_lines and self.engine_lines):
            return
        self.shifted = 1
        for index in self.engine_lines:  # `records` and `anchors` are appended together
            self.records[index]["_step"] -= 1
            self.anchors[index].step -= 1
        for mention in self.mentions:  # `Grad overflow on iteration N` is engine step N+1
            if mention.step is not None:
                mention.step -= 1
        self.source.notes.append(
            "steps are DeepSpeed-Chat's PPO `step:` as printed (counted from 0); the DeepSpeed "
            "engines count from 1 (`step=N` is printed just before PPO step N-1), so their "
            f"{len(self.engine_lines)} `step=` / `global_step=` line(s) are placed at N-1"
        )


def _whole_ppo_fields(line: str) -> tuple[str, str] | None:
    """A cut PPO step line up to its last `|`, and its last whole field's key; None when it
    is no PPO line or keeps no field."""
    whole = line[: line.rfind("|") + 1]
    m = _PPO.search(whole)
    fields = _ppo_fields(m.group(3))[0] if m is not None else {}
    return (whole, list(fields)[-1]) if fields else None


def _ppo_fields(text: str) -> tuple[dict[str, str], str | None]:
    """The `key: value` fields after a PPO line's step, and a key that cannot be one (given
    twice, or `step` or `_...` again), which makes the line unreadable."""
    fields: dict[str, str] = {}
    for part in text.split("|"):
        key, sep, value = part.partition(":")
        key = key.strip()
        if not sep or key == "ppo_ep":
            continue
        if key in fields or key == "step" or key.startswith("_"):
            return fields, key  # which of two values is meant cannot be told
        fields[key] = value
    return fields, None


def _note_placed(scan: _Scan, source: SourceInfo) -> None:
    """How the lines that print no step got one (`_dsplace`)."""
    if scan.after:
        source.notes.append(
            f"{len(scan.after)} line(s) that print no step (evaluation, reward, epoch loss) are "
            "placed at the step line before them"
        )
    if scan.before:
        source.notes.append(
            f"{len(scan.before)} per-micro-batch throughput line(s) print no step: those between "
            "two step lines are spread over the steps between them, in order, and each step "
            "carries the mean of its lines"
        )


def _note_skipped(scan: _Scan, events: list[dsm.Event], source: SourceInfo) -> None:
    """What `skipped=` was turned into, or why two engines' messages are not told apart."""
    if scan.engine_step is not None and len(scan.skipped_so_far) > 1:
        source.notes.append(
            f"{len(scan.skipped_so_far)} DeepSpeed engines log `step=` lines (DeepSpeed-Chat "
            "RLHF: actor, then critic); the second engine's values are kept as engine2/..., "
            "and the loss-scale messages of both engines cannot be told apart"
        )
    elif 1 in scan.skipped_so_far:
        n_over = sum(e.kind == "overflow" for e in events)
        said = scan.skipped_so_far[1]
        source.notes.append(
            f"DeepSpeed's `skipped=` is cumulative (last: {said}); "
            f"kept as skipped steps per progress interval. Overflow events read: {n_over}"
            + (
                ""
                if n_over == said
                else f" (the counter says {said}: "
                + (
                    "some skips printed no message"
                    if n_over < said
                    else "some messages are not skips"
                )
                + ")"
            )
        )


def _read_dtype(scan: _Scan, source: SourceInfo) -> None:
    """The config dump's switches, else fp16 when there are loss-scale messages."""
    if scan.switches and source.dtype is None:
        # both switches off is fp32, DeepSpeed's default: evidence too, not only a True
        found = dtype_from(
            *(
                (f"DeepSpeed config dump (line {row})", {k: v})
                for k, (v, row) in scan.switches.items()
            )
        )
        if found is not None:
            source.dtype, source.dtype_origin = found
    if scan.mentions and source.dtype is None:
        source.dtype = "fp16"
        source.dtype_origin = "inferred: DeepSpeed fp16 dynamic loss-scale messages"


def _num(text: str) -> float | None:
    try:
        return tl.number(text)
    except ValueError:
        return None


def _numbers(row: int, fields: dict[str, str], source: SourceInfo) -> dict | None:
    """A row of floats, or None (and the line rejected) when a value is not a number."""
    out: dict = {"_row": row}
    for key, text in fields.items():
        value = _num(text)
        if value is None:
            source.reject(row, f"{key!r}: {text.strip()[:30]!r} is not a number")
            return None
        out[key] = value
    return out
