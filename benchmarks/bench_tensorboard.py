"""How fast stab reads a TensorBoard event file with 1,000,000 scalars of one tag,
against tbparse.

    /tmp/venv/bin/python benchmarks/bench_tensorboard.py [--points N] [--writer tensorboardX|own]

The file holds `add_scalar("train/loss", v, step)` events: one `simple_value`
per event. By default it is logged through tensorboardX's real SummaryWriter
(about 1 minute at 1M points); `--writer own` (the default when tensorboardX
is not installed) writes the same Event layout with our own TFRecord writer.

Timed in this run, on the same file:

* stab's reader end to end (`stabilitycli.ingest.read`), data CRC checked (the default);
* stab's record loop with and without the data CRC check, to show what the check costs;
* tbparse `SummaryReader(dir).scalars` (TensorBoard's EventAccumulator with
  nothing sampled away, then pandas). `pip install tbparse` for this baseline;
  it is not a stab dependency.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _series import loss_curve, tfrecord

TAG = "train/loss"


def make_values(points: int) -> np.ndarray:
    return loss_curve(points).astype(np.float32)  # TensorBoard scalars are float32


def write_own(path: Path, values: np.ndarray) -> None:

    from stabilitycli.ingest.tensorboard import _proto as tbp

    event_cls = tbp.messages()["Event"]

    frame = tfrecord

    with open(path, "wb") as handle:
        handle.write(
            frame(event_cls(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
        )
        for step, value in enumerate(values.tolist()):
            event = event_cls(wall_time=1.7e9 + step * 0.01, step=step)
            event.summary.value.add(tag=TAG, simple_value=value)
            handle.write(frame(event.SerializeToString()))


def write_tensorboardx(folder: Path, values: np.ndarray) -> None:
    import logging

    from tensorboardX import SummaryWriter

    logging.getLogger("tensorboardX").setLevel(logging.ERROR)
    writer = SummaryWriter(str(folder), max_queue=10_000, flush_secs=3600)
    for step, value in enumerate(values.tolist()):
        writer.add_scalar(TAG, value, step)
    writer.close()


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def record_loop(path: Path, verify: bool) -> int:
    from stabilitycli.core.model import SourceInfo
    from stabilitycli.ingest.tensorboard.reader import Collector, read_event_file

    collector = Collector()
    read_event_file(
        path, collector, SourceInfo(path=str(path), format="tensorboard"), verify_data=verify
    )
    return collector.point_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    has_tbx = importlib.util.find_spec("tensorboardX") is not None
    parser.add_argument(
        "--writer", choices=("own", "tensorboardX"), default="tensorboardX" if has_tbx else "own"
    )
    parser.add_argument("--skip-tbparse", action="store_true")
    args = parser.parse_args()
    from stabilitycli import ingest

    folder = Path(tempfile.mkdtemp(prefix="stab-bench-tb-")) / "run"
    folder.mkdir()
    values = make_values(args.points)
    if args.writer == "own":
        seconds, _ = timed(
            lambda: write_own(folder / "events.out.tfevents.1700000000.bench", values)
        )
    else:
        seconds, _ = timed(lambda: write_tensorboardx(folder, values))
    event_file = next(folder.iterdir())
    size_mb = event_file.stat().st_size / 1e6
    print(
        f"{args.points:,} scalars of {TAG!r}, {size_mb:.1f} MB, written by {args.writer} in "
        f"{seconds:.1f} s"
    )

    seconds_stab, run = timed(lambda: ingest.read(folder))
    assert run.frame.height == args.points, run.frame.height
    n = args.points
    assert math.isnan(run.frame["loss"][n // 2]) and run.frame["loss"][n // 2 + 1] == math.inf
    seconds_crc, count_crc = timed(lambda: record_loop(event_file, verify=True))
    seconds_nocrc, count_nocrc = timed(lambda: record_loop(event_file, verify=False))
    assert count_crc == count_nocrc == n
    print(f"  stab ingest.read (data CRC checked):  {seconds_stab:7.2f} s")
    print(f"  record loop, data CRC checked:        {seconds_crc:7.2f} s")
    print(
        f"  record loop, header CRC only:         {seconds_nocrc:7.2f} s "
        f"(data CRC costs {seconds_crc - seconds_nocrc:.2f} s, "
        f"{(seconds_crc - seconds_nocrc) / seconds_nocrc:.0%})"
    )
    if args.skip_tbparse:
        return
    try:
        from tbparse import SummaryReader
    except ImportError:
        print("  tbparse not installed (pip install tbparse): baseline skipped", file=sys.stderr)
        return
    seconds_tb, frame = timed(lambda: SummaryReader(str(folder)).scalars)
    assert len(frame) == n, len(frame)
    print(
        f"  tbparse SummaryReader(dir).scalars:   {seconds_tb:7.2f} s "
        f"(stab is {seconds_tb / seconds_stab:.1f}x faster, same file, same run)"
    )


if __name__ == "__main__":
    main()
