"""What `stab watch` costs while a run is written, and how soon it alerts.

    python benchmarks/bench_watch.py [--seconds 120] [--ranks 64] [--rate 10] [--spike-at 900]

A writer process appends one JSON line per step to each of `--ranks` rank files at
`--rate` steps a second, and from `--spike-at` on every rank's loss is 4 higher (a
persistent spike). `stab watch` follows the folder (default interval, 2 s) with its
alerts going to a file; this process reads that file as it grows and notes when each
alert appears. Reported:

- CPU share of the watch (user + system CPU of its process over its wall time), against
  the baseline measured in the same run: `stab analyze` rerun on the log at every poll
  interval (what an on-call engineer does by hand), from the CPU of one analyze of the
  final log;
- alert latency: for the spike's onset alert and its settled update, the logged steps and
  the seconds from the logged point that makes it decidable (the onset; the onset + the
  50-step recovery window) to the alert, and those seconds in poll intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

WRITER = r"""
import json, sys, time
import numpy as np
folder = sys.argv[1]
ranks, spike_at = int(sys.argv[2]), int(sys.argv[5])
rate, seconds = float(sys.argv[3]), float(sys.argv[4])
rng = np.random.default_rng(0)
files = [open(f"{folder}/rank_{r:02d}.jsonl", "a", buffering=1) for r in range(ranks)]
began = time.monotonic()
step = 0
while time.monotonic() - began < seconds:
    loss = 2.0 + 1.5 * np.exp(-step / 400) + rng.normal(0, 0.01, ranks)
    loss += 4.0 if step >= spike_at else 0.0
    for r, f in enumerate(files):
        f.write(json.dumps({"step": step, "rank": r, "loss": float(loss[r]), "lr": 3e-4}) + "\n")
    if step in (spike_at, spike_at + 50):
        print(json.dumps({"step": step, "t": time.time()}), flush=True)
    step += 1
    time.sleep(max(0.0, began + step / rate - time.monotonic()))
"""


def _cpu_of(command: list[str], **kwargs) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one process run to its end."""
    began = time.monotonic()
    process = subprocess.Popen(command, **kwargs)
    _, _, usage = os.wait4(process.pid, 0)
    return usage.ru_utime + usage.ru_stime, time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--rate", type=float, default=10.0, help="steps a second")
    parser.add_argument("--spike-at", type=int, default=900)
    parser.add_argument("--interval", type=float, default=2.0)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stab = [sys.executable, "-m", "stabilitycli"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        alerts = Path(tmp) / "alerts.jsonl"
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(folder), str(args.ranks), str(args.rate),
             str(args.seconds), str(args.spike_at)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(1.0)
        watch_began = time.monotonic()
        watch = subprocess.Popen(
            [*stab, "watch", str(folder), "--interval", str(args.interval), "--idle", "6",
             "--format", "json", "--alerts", str(alerts)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        seen: dict[tuple[str, str], float] = {}
        while True:
            pid, _, usage = os.wait4(watch.pid, os.WNOHANG)
            if alerts.exists():
                for line in alerts.read_text().splitlines():
                    alert = json.loads(line)
                    seen.setdefault((alert["code"], alert["status"]), time.time())
            if pid:
                break
            time.sleep(0.1)
        watch.returncode = 0  # reaped above, with its CPU time
        watch_wall = time.monotonic() - watch_began
        watch_cpu = usage.ru_utime + usage.ru_stime
        out = writer.communicate()[0].splitlines()
        written = {json.loads(x)["step"]: json.loads(x)["t"] for x in out}
        # the baseline: one `stab analyze` of the final log, rerun at every interval
        analyze_cpu, _ = _cpu_of([*stab, "analyze", str(folder), "-q"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        found = [json.loads(line) for line in alerts.read_text().splitlines()]
    rerun_share = analyze_cpu / args.interval
    share = watch_cpu / watch_wall
    steps = int(args.seconds * args.rate)
    print(f"run: {args.ranks} ranks x {steps} steps at {args.rate:g} steps/s "
          f"({args.ranks * steps} points), watched {watch_wall:.0f} s")  # fmt: skip
    print(f"stab watch CPU: {watch_cpu:.2f} s = {100 * share:.1f}% of one core "
          f"(target <= 5%)")  # fmt: skip
    print(f"baseline, `stab analyze` rerun every {args.interval:g} s on the final log: "
          f"{analyze_cpu:.2f} s each = {100 * rerun_share:.0f}% of one core; "
          f"watch / baseline = {share / rerun_share:.3f}")  # fmt: skip
    for status, decisive in (("pending", args.spike_at), ("persistent", args.spike_at + 50)):
        alert = next((a for a in found if a["code"] == "spike" and a["status"] == status), None)
        if alert is None or decisive not in written:
            print(f"spike {status}: no alert")
            continue
        seconds = seen[("spike", status)] - written[decisive]
        print(f"spike {status}: decidable at step {decisive}, alerted with step "
              f"{alert['logged_step']} logged ({alert['logged_step'] - decisive} steps later), "
              f"{seconds:.1f} s after the decisive point was written = "
              f"{seconds / args.interval:.1f} poll intervals")  # fmt: skip


if __name__ == "__main__":
    main()
