"""PyTorch Lightning's TQDM progress bar, as `kvlog` reads it.

Lightning's `TQDMProgressBar` draws one bar an epoch,

    Epoch 1:  83%|████████▎ | 25/30 [00:00<00:00, 257.14it/s, v_num=0, train_loss=2.870]

with the metrics logged with `prog_bar=True` in the postfix. The numbers go
through its `Tqdm.format_num`: tqdm's `{:.3g}`-style shortening, then padded to
five characters (`2.870`, `14.80`, `1e-5`), which turns NaN into `nan.0`, +Inf
into `inf.0` and -Inf into `-inf.`. `v_num` is the logger's version, not a
metric. The count `25/30` is the batches done in this epoch, so the batch the
postfix was logged at is `epoch * 30 + 25 - 1`, the 0-based `global_step` the
CSVLogger writes (without gradient accumulation). Each batch is drawn twice,
first with the previous batch's postfix, then with its own: the last draw of a
step holds its values; a bar at `0/30` (a new epoch, drawn with the last
epoch's postfix) holds none. A bar with a `global_step=` field (NeMo) or without a
total (`25it [`) is left to the generic reading.
"""

from __future__ import annotations

import re

from stabilitycli.ingest.text import _textline as tx

# `Epoch 1:  83%|...| 25/30 [00:00<00:00, 257.14it/s, k=v, ...]`
# ASCII digits only, and few enough for an int64 step (a damaged line can hold thousands;
# `\d` also takes other scripts' digits)
PATTERN = r"^Epoch ([0-9]{1,9}):\s+\d+%\|[^|]*\|\s*([0-9]{1,9})/([0-9]{1,9}) \[([^\]]*)\]"
_BAR = re.compile(PATTERN)
_FIELD = re.compile(r"^\s*([A-Za-z_][\w/.\- ]*?)=(\S+)\s*$")
_PADDED_NON_FINITE = re.compile(r"^([-+]?(?:nan|inf))\.0*$")
NOT_METRICS = ("v_num",)


def parse(text: str) -> tuple[int, dict[str, float]] | None:
    """The step and postfix metrics of one Lightning bar draw, or None for another line.

    A draw without metrics in its postfix gives `(step, {})`.
    """
    match = _BAR.match(text)
    if match is None:
        return None
    epoch, done, total = (int(match.group(i)) for i in (1, 2, 3))
    metrics: dict[str, float] = {}
    if done == 0:  # a new epoch's bar, drawn with the last epoch's postfix
        return epoch * total - 1, metrics
    for part in match.group(4).split(",")[1:]:  # the first part is the elapsed time
        field = _FIELD.match(part)
        if field is None:
            continue
        key, raw = field.group(1), field.group(2)
        if key == "global_step":
            return None  # NeMo's bar names its own step
        if key in NOT_METRICS:
            continue
        padded = _PADDED_NON_FINITE.match(raw)
        try:
            metrics[key] = tx.value(padded.group(1) if padded else raw)
        except ValueError:
            continue
    return epoch * total + done - 1, metrics
