"""stab against the floor: how far each command is from just reading its input (issue #15).

How to run it (from the repository root):

    nice .venv/bin/python benchmarks/run.py                 # every case, full sizes
    .venv/bin/python benchmarks/run.py --quick              # 1/100 sizes, 1 run each: a smoke run
    .venv/bin/python benchmarks/run.py --only jsonl-10m --repeat 5
    .venv/bin/python benchmarks/run.py --out docs/performance.md --json /tmp/perf.json

Inputs are generated from a seed on first use and cached outside the repo
(`~/.cache/stab-bench/`, or `--cache DIR`), each file named by its size and
seed, so later runs reuse them: the full set takes about 20 GB (the 30M-row
logs are 4.5 GB each as JSONL). `--list` names the cases.

Every measurement is a fresh process: its wall time, and its peak RSS from
`os.wait4`'s rusage, belong to that command alone. The commands of a case run
interleaved (floor, stab, peer, floor, stab, peer...) `--repeat` times, so load
from other jobs on the machine hits all of them, and the table shows medians.
A command that passes `--max-rss-gb` is killed and reported as such, so a
regression cannot take a shared machine down.

What a case's stab time is compared with, measured in the same run:

* the floor: `polars.read_ndjson` of the same file; `scan_ndjson(...).select(<the
  columns stab's rules read>)` (the projection floor, whose Arrow size is the
  memory target's base); `pyarrow.parquet.read_table` of a Parquet copy; for
  TensorBoard the TFRecord walk with one protobuf parse per event; for MLflow
  the metric files parsed by polars' CSV reader;
* the peer: stab's spike and rank rules written plainly in pandas
  (`benchmarks/_perf_pandas_peer.py`), skipped (with a note) where its memory
  (about 1.8 KB a row) would pass half of the machine's available memory;
* the format clients where installed: `MlflowClient.get_metric_history`
  (quadratic in points on the file store, so timed on a 1/10 store),
  `tbparse`.

stab is run as a user runs it: the `.venv/bin/stab` console script (or
`--stab PATH`), with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from
the environment) after one untimed warm-up run.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import _perf_cases as cases
import _perf_report as report

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Sample:
    seconds: float
    maxrss_mb: float
    exit_code: int
    output: dict = field(default_factory=dict)
    killed: bool = False
    stderr_tail: str = ""


TIME = "/usr/bin/time"  # GNU time: forks the command from a small process (see measure)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _child_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            found = handle.read().split()
    except OSError:
        return None
    return int(found[0]) if found else None


def measure(argv: list[str], env: dict[str, str], max_rss_mb: float) -> Sample:
    """Run `argv` once: wall time, peak RSS (of it and the children it waited for), exit code,
    and the JSON line a floor prints on stdout.

    The peak RSS comes from GNU time, not from our own wait4: a process spawned from
    this one (vfork + exec) starts its ru_maxrss at this process's peak, which grows
    with the inputs generated here; GNU time's forked child starts from time's few MB."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r") as rss,
    ):
        timed = [TIME, "-f", "%M", "-o", rss.name, *argv]
        start = time.perf_counter()
        pid = os.posix_spawn(
            TIME,
            timed,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                (os.POSIX_SPAWN_DUP2, err.fileno(), 2),
            ],
        )
        done = threading.Event()
        killed = []

        def watch() -> None:  # a thread, so that the timing is not rounded to a poll interval
            while not done.wait(0.2):
                child = _child_of(pid)
                if child is not None and _rss_mb(child) > max_rss_mb:
                    killed.append(True)
                    os.kill(child, 9)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, _ = os.wait4(pid, 0)
        seconds = time.perf_counter() - start
        done.set()
        out.seek(0)
        tail = out.read()[-4096:].decode(errors="replace").strip().splitlines()
        err.seek(0)
        errors = err.read()[-2000:].decode(errors="replace")
        reported = rss.read().split()  # "Command exited with non-zero status N" comes first
    parsed: dict = {}
    if tail and tail[-1].startswith("{"):
        with contextlib.suppress(ValueError):  # a command that printed no JSON line
            parsed = json.loads(tail[-1])
    return Sample(
        seconds=seconds,
        maxrss_mb=int(reported[-1]) / 1024 if reported else float("nan"),  # time reports KiB
        exit_code=os.waitstatus_to_exitcode(status),
        output=parsed,
        killed=bool(killed),
        stderr_tail=errors,
    )


def user_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install writes and reuses __pycache__
    env["COLUMNS"] = "120"  # stdout is a file: a terminal-sized render, as a user would see
    return env


def run_case(case: cases.Case, repeat: int, env: dict[str, str], max_rss_mb: float) -> dict:
    runs = case.repeat_factor * repeat
    samples: dict[str, list[Sample]] = {s.key: [] for s in case.subjects}
    if case.warm_up:
        for subject in case.subjects:
            measure(subject.argv, env, max_rss_mb)
    for _ in range(runs):  # interleaved: each round runs every command once
        for subject in case.subjects:
            sample = measure(subject.argv, env, max_rss_mb)
            if sample.exit_code not in subject.ok_exit_codes and not sample.killed:
                raise SystemExit(
                    f"{case.name}: {' '.join(subject.argv)} exited {sample.exit_code}:\n"
                    f"{sample.stderr_tail}"
                )
            samples[subject.key].append(sample)
    result = {
        "case": case.name,
        "rows": case.rows,
        "file_mb": case.file_mb,
        "notes": case.notes,
        "subjects": {},
    }
    for subject in case.subjects:
        got = samples[subject.key]
        result["subjects"][subject.key] = {
            "label": subject.label,
            "argv": subject.argv,
            "runs": len(got),
            "seconds": median(s.seconds for s in got),
            "seconds_all": [round(s.seconds, 3) for s in got],
            "maxrss_mb": median(s.maxrss_mb for s in got),
            "killed": any(s.killed for s in got),
            "output": got[-1].output,
        }
    return result


def _git(*args: str) -> str:
    import subprocess

    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def machine() -> dict:
    import platform

    import polars
    import pyarrow

    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "polars": polars.__version__,
        "pyarrow": pyarrow.__version__,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "stab_sources_dirty": bool(_git("status", "--porcelain", "--", "stabilitycli")),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_start": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/100 sizes, 1 run: a smoke run")
    parser.add_argument("--scale", type=float, help="size factor (default 1, or 0.01 with --quick)")
    parser.add_argument(
        "--repeat", type=int, help="paired runs per case (default 3, 1 with --quick)"
    )
    parser.add_argument(
        "--only", action="append", default=[], help="case name or glob (repeatable)"
    )
    parser.add_argument("--list", action="store_true", help="name the cases and exit")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "stab-bench")
    parser.add_argument("--stab", default=str(ROOT / ".venv" / "bin" / "stab"))
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--max-rss-gb", type=float, default=8.0, help="kill a command above this")
    parser.add_argument(
        "--out", type=Path, help="write the tables as Markdown (docs/performance.md)"
    )
    parser.add_argument("--json", type=Path, help="write the raw numbers")
    args = parser.parse_args()
    scale = args.scale if args.scale is not None else (0.01 if args.quick else 1.0)
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    names = [
        n
        for n in cases.NAMES
        if not args.only or any(fnmatch.fnmatch(n, f"{p}*") for p in args.only)
    ]
    if args.list or not names:
        print("\n".join(cases.NAMES))
        return
    args.cache.mkdir(parents=True, exist_ok=True)
    env = user_env()
    measure([args.stab, "--help"], env, args.max_rss_gb * 1024)  # writes stab's bytecode cache
    setup = cases.Setup(
        cache=args.cache,
        scale=scale,
        seed=args.seed,
        stab=args.stab,
        python=sys.executable,
        max_rss_mb=args.max_rss_gb * 1024,
    )
    info = machine()
    results = []
    for name in names:
        started = time.perf_counter()
        case = cases.build(name, setup)
        made = time.perf_counter() - started
        for note in case.notes:
            print(f"  note: {note}", file=sys.stderr)
        result = run_case(case, repeat, env, args.max_rss_gb * 1024)
        result["load"] = os.getloadavg()[0]
        results.append(result)
        print(
            f"{name}: done in {time.perf_counter() - started:.0f} s (input ready in {made:.0f} s), "
            f"load average {result['load']:.2f}",
            file=sys.stderr,
            flush=True,
        )
    info["load_end"] = os.getloadavg()
    command = " ".join(["python", "benchmarks/run.py", *sys.argv[1:]])
    run = {
        "command": command,
        "machine": info,
        "scale": scale,
        "repeat": repeat,
        "results": results,
    }
    print(report.text(run))
    if args.json:
        args.json.write_text(json.dumps(run, indent=1))
    if args.out:
        args.out.write_text(report.markdown(run))


if __name__ == "__main__":
    main()
