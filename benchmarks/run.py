"""stab against the floor: how far each command is from just reading its input (issue #15).

How to run it (from the repository root):

    nice .venv/bin/python benchmarks/run.py                 # every case, full sizes
    .venv/bin/python benchmarks/run.py --quick              # 1/100 sizes, 1 run each: a smoke run
    .venv/bin/python benchmarks/run.py --only jsonl-10m --repeat 5
    .venv/bin/python benchmarks/run.py --out docs/performance.md --json /tmp/perf.json
    # refresh some cases, keep the others from earlier --json runs (--merge repeats):
    .venv/bin/python benchmarks/run.py --only startup --merge /tmp/perf.json --json /tmp/perf2.json

To measure committed sources while the checkout changes, point the console
script at a snapshot: `git archive HEAD stabilitycli | tar -x -C /tmp/snap`,
then `PYTHONPATH=/tmp/snap ... --label "<commit>"`.

Inputs are generated from a seed into a fresh folder under /tmp, deleted when
the run ends (the full set takes about 16 GB: the 30M-row logs are 4.7 GB each
as JSONL). `--cache DIR` keeps them in DIR instead, each file named by its size
and seed, so later runs reuse them. `--list` names the cases. A full run with
`--repeat 1` took 30 minutes on a 2-core machine (the 10,000-run batch case
alone 9); `--repeat 3` about three times that.

Every measurement is a fresh process: its wall time, and its peak RSS as GNU
`/usr/bin/time` reports it (of the process and the children it waited for),
belong to that command alone. The commands of a case run
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
import fnmatch
import json
import os
import shlex
import sys
import time
from pathlib import Path
from statistics import median

import _perf_cases as cases
import _perf_report as report
from _paths import portable
from _perf_measure import Sample, measure

ROOT = Path(__file__).resolve().parents[1]


def user_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install writes and reuses __pycache__
    # stab refuses inputs over 2 GiB unless told otherwise; the 30M-row logs are 4.6 GB.
    # Not higher: at 64 GiB stab's MLflow file-store reader fails with "out of memory"
    env.setdefault("STAB_LIMIT_MAX_INPUT_BYTES", str(16 * 2**30))
    env["COLUMNS"] = "120"  # stdout is a file: a terminal-sized render, as a user would see
    return env


def _failure(sample: Sample, subject: cases.Subject) -> str:
    if sample.killed:
        return "killed above --max-rss-gb"
    if sample.exit_code in subject.ok_exit_codes:
        return ""
    said = sample.stderr_tail.strip().splitlines()
    return f"exit {sample.exit_code}: {said[-1] if said else 'no message'}"


def run_case(case: cases.Case, repeat: int, env: dict[str, str], max_rss_mb: float) -> dict:
    runs = case.repeat_factor * repeat
    samples: dict[str, list[Sample]] = {s.key: [] for s in case.subjects}
    if case.warm_up:
        for subject in case.subjects:
            measure(subject.argv, env, max_rss_mb)
    for _ in range(runs):  # interleaved: each round runs every command once
        for subject in case.subjects:
            sample = measure(subject.argv, env, max_rss_mb)
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
            # a failed command is reported, not fatal: the other cases still run
            "failed": next((f for f in (_failure(s, subject) for s in got) if f), ""),
            "output": got[-1].output,
        }
    return result


def _git(*args: str) -> str:
    import subprocess

    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def machine(env: dict[str, str]) -> dict:
    import platform
    import subprocess

    import polars
    import pyarrow

    return {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "polars": polars.__version__,
        "pyarrow": pyarrow.__version__,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "stab_sources_dirty": bool(_git("status", "--porcelain", "--", "stabilitycli")),
        # PYTHONPATH can point the console script at a snapshot of the sources
        "stab_imported_from": subprocess.run(
            [sys.executable, "-c", "import stabilitycli; print(stabilitycli.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            cwd="/",  # -c puts the working directory first on sys.path; the console script does not
        ).stdout.strip(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "load_start": os.getloadavg(),
    }


def merged(run: dict, earlier: dict) -> dict:
    """`run`, with the cases it did not measure taken from an `earlier` run of the same sizes
    (so that a long case need not be rerun to refresh the short ones). Merged again, a
    later `earlier` fills only what is still missing; each kept case names its run."""
    if earlier["scale"] != run["scale"]:
        raise SystemExit(f"--merge: sizes differ (scale {earlier['scale']} and {run['scale']})")
    runs = run.setdefault("earlier_runs", [])
    runs.append({"command": earlier["command"], "machine": earlier["machine"]})
    mine = {r["case"]: r for r in run["results"]}
    theirs = {r["case"]: {**r, "earlier": len(runs)} for r in earlier["results"]}
    run["results"] = [
        mine.get(name) or theirs[name] for name in cases.NAMES if name in mine or name in theirs
    ]
    return run


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
    parser.add_argument(
        "--cache", type=Path, help="keep the inputs here (default: under /tmp, deleted after)"
    )
    parser.add_argument("--stab", default=str(ROOT / ".venv" / "bin" / "stab"))
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--max-rss-gb", type=float, default=8.0, help="kill a command above this")
    parser.add_argument(
        "--out", type=Path, help="write the tables as Markdown (docs/performance.md)"
    )
    parser.add_argument("--json", type=Path, help="write the raw numbers")
    parser.add_argument("--label", help="what was measured, when not this checkout's HEAD")
    parser.add_argument(
        "--merge",
        type=Path,
        action="append",
        default=[],
        help="an earlier --json run: its cases not run now are kept (repeatable; the first "
        "named wins where two hold a case)",
    )
    parser.add_argument(
        "--render", type=Path, help="measure nothing: print (and --out) a saved --json run"
    )
    args = parser.parse_args()
    if args.render:
        publish(json.loads(args.render.read_text()), args)
        return
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
    if args.cache is not None:
        args.cache.mkdir(parents=True, exist_ok=True)
        measure_all(args, names, scale, repeat)
        return
    import shutil
    import tempfile

    # the inputs are gigabytes: made for this run, gone after it, even when it is stopped
    args.cache = Path(tempfile.mkdtemp(prefix="stab-bench-", dir="/tmp"))
    try:
        measure_all(args, names, scale, repeat)
    finally:
        shutil.rmtree(args.cache, ignore_errors=True)


def measure_all(args: argparse.Namespace, names: list[str], scale: float, repeat: int) -> None:
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
    info = machine(env)
    info["stab_env"] = {k: v for k, v in env.items() if k.startswith("STAB_")}
    if args.label:
        info["label"] = args.label
    results: list[dict] = []
    run = {
        "command": shlex.join(["python", "benchmarks/run.py", *sys.argv[1:]]),
        "machine": info,
        "scale": scale,
        "repeat": repeat,
        "results": results,
    }
    for name in names:
        started = time.perf_counter()
        case = cases.build(name, setup)
        made = time.perf_counter() - started
        for note in case.notes:
            print(f"  note: {note}", file=sys.stderr)
        result = run_case(case, repeat, env, args.max_rss_gb * 1024)
        result["load"] = os.getloadavg()[0]
        results.append(result)
        info["load_end"] = os.getloadavg()
        if args.json:  # after every case: a stopped run keeps what it measured (--render)
            args.json.write_text(json.dumps({**run, "partial": True}, indent=1))
        timings = ", ".join(
            f"{s['label']} {s['seconds']:.2f} s{' (' + s['failed'] + ')' if s['failed'] else ''}"
            for s in result["subjects"].values()
        )
        print(
            f"{name}: {timings}; done in {time.perf_counter() - started:.0f} s (input ready in "
            f"{made:.0f} s), load average {result['load']:.2f}",
            file=sys.stderr,
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(run, indent=1))
    publish(run, args)


def publish(run: dict, args: argparse.Namespace) -> None:
    """Print the tables and write --out, with --merge's earlier cases added."""
    for path in args.merge:
        run = merged(run, json.loads(path.read_text()))
    if args.out:
        args.out.write_text(portable(report.markdown(run)))
    print(report.text(run))


if __name__ == "__main__":
    main()
