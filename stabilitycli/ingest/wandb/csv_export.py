"""The CSV a W&B chart exports ("Export panel data -> CSV").

Header: `Step`, then per run `<run name> - <metric>`, with `__MIN` / `__MAX`
companions (the envelope of the points each chart bucket stands for). Only
the main columns are read, renamed to `<metric>`; with several runs in one
export, `options.run` picks one (the error lists them).

Such an export is DOWNSAMPLED for the chart (W&B keeps a sample of the points
per bucket), so a one-step spike or a lone NaN can be missing from it: every
reading says so in a warning. The raw history (the `.wandb` file or the API)
is the complete source.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.model import SourceInfo
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tabular import tables as tabular

NAME = "wandb_csv"
SEPARATOR = " - "
_ENVELOPE = re.compile(r"__(MIN|MAX)$")


def sniff(path: Path, head: bytes) -> bool:
    if path.is_dir() or not path.name.lower().endswith(".csv"):
        return False
    header = head.split(b"\n", 1)[0].decode("utf-8", "replace")
    cells = [c.strip().strip('"') for c in header.split(",")]
    return bool(cells) and cells[0] == "Step" and any(SEPARATOR in c for c in cells[1:])


def read(path: Path, options: ReadOptions):
    source = SourceInfo(path=str(path), format=NAME)
    raw = tabular.read_csv(path, source, limits=options.limits)
    if "Step" not in raw.columns:  # read with --format-in, or a header damaged
        raise StabInputError(str(path), "no `Step` column: not a W&B chart export", line=1)
    main = [c for c in raw.columns if SEPARATOR in c and not _ENVELOPE.search(c)]
    runs: dict[str, list[str]] = {}
    for column in main:
        run, _, _metric = column.rpartition(SEPARATOR)
        runs.setdefault(run, []).append(column)
    if not runs:
        raise StabInputError(str(path), "no `<run> - <metric>` column in this W&B export")
    chosen = list(runs)
    if options.run:
        chosen = [r for r in runs if options.run in r]
    if len(chosen) != 1:
        names = ", ".join(sorted(runs)[:10])
        raise StabInputError(
            str(path),
            f"{len(runs)} runs in this export ({names}); choose one with --run NAME"
            if len(chosen) > 1 or not options.run
            else f"no run matching --run {options.run!r} ({names})",
        )
    run = chosen[0]
    source.run = run
    keep = {column: column.rpartition(SEPARATOR)[2] for column in runs[run]}
    dropped = len([c for c in raw.columns if _ENVELOPE.search(c) and c.startswith(run + SEPARATOR)])
    raw = raw.select(["_row", "Step", *keep]).rename(keep)
    source.warnings.append(
        "a W&B chart export is downsampled for the chart: a one-step spike or a lone NaN may be "
        "missing; the run's full history (.wandb file or API) is complete"
    )
    if dropped:
        source.notes.append(f"{dropped} __MIN/__MAX envelope columns not read")
    return tabular.finish(raw, source, replace(options, step_key=options.step_key or "Step"))
