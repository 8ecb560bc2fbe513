"""Record (or check) the JSON output of `stab analyze` and `stab ranks` on every fixture.

Used to prove that a refactor changed no behaviour: run it with `--write DIR`
before the change and with `--check DIR` after; `--check` prints every input
whose output differs and exits 1 if any does.

    python scripts/fixture_outputs.py --write /tmp/before
    python scripts/fixture_outputs.py --check /tmp/before
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def _inputs() -> list[tuple[str, list[str]]]:
    """(name, stab arguments) for every fixture input a user could point stab at."""
    jobs: list[tuple[str, list[str]]] = []
    for group in ("runs", "torch-runs", "compare"):
        for run_dir in sorted(p for p in (FIXTURES / group).iterdir() if p.is_dir()):
            logs = sorted(p for p in run_dir.iterdir() if p.name.startswith("run.jsonl"))
            for log in logs:
                jobs.append((f"analyze {log.relative_to(ROOT)}", ["analyze", str(log)]))
    singles = [
        "deepspeed/chat_two_engines.log",
        "deepspeed/fused_4ranks.log",
        "hf_trainer/trainer_state.json",
        "llmc/main.log",
        "megatron/gpt_fp16.log",
        "lightning/lightning_logs",
    ]
    for rel in singles:
        jobs.append((f"analyze fixtures/{rel}", ["analyze", str(FIXTURES / rel)]))
    for rank_input in sorted(p for p in (FIXTURES / "ranks").iterdir() if p.name != "README.md"):
        rel = rank_input.relative_to(ROOT)
        jobs.append((f"analyze {rel}", ["analyze", str(rank_input)]))
        jobs.append((f"ranks {rel}", ["ranks", "--run", str(rank_input)]))
    return jobs


def _run(args: list[str]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "stabilitycli", *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return {"exit": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, help="folder to write the outputs into")
    mode.add_argument("--check", type=Path, help="folder of outputs written earlier")
    args = parser.parse_args()

    jobs = _inputs()
    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = dict(zip([n for n, _ in jobs], pool.map(_run, [a for _, a in jobs]), strict=True))

    target = args.write or args.check
    store = target / "outputs.json"
    if args.write:
        target.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(outputs, indent=1, sort_keys=True))
        print(f"wrote {len(outputs)} outputs to {store}")
        return 0
    before = json.loads(store.read_text())
    differing = [
        name
        for name in sorted(before.keys() | outputs.keys())
        if before.get(name) != outputs.get(name)
    ]
    for name in differing:
        print(f"DIFFERS: {name}")
    print(f"{len(outputs) - len(differing)} of {len(outputs)} outputs identical")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
