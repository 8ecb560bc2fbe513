"""Record (or check) every output of stab on every input it ships with or is judged on.

A refactor that claims "no behaviour change" proves it with this: run `--write DIR`
on the code before, `--check DIR` on the code after. Inputs are every file and
folder under `fixtures/` (notes excepted), every real log and pasted log beside
the checkout (`../shared`); outputs are `stab analyze` as JSON, Markdown and the
terminal at a fixed width of 100 columns, and `stab ranks` as JSON and terminal,
each with its exit status and stderr. Paths are given relative to the checkout,
so two checkouts in sibling folders give the same bytes.

The commands run in-process (typer's CliRunner) in two worker processes, so the
whole sweep costs the analysis, not a Python start-up per output.

    python scripts/same_outputs.py --write /tmp/before
    python scripts/same_outputs.py --check /tmp/before
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from multiprocessing import Pool
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path("..") / "shared"
WIDTH_COLUMNS = "100"

# (label, arguments after the path)
OUTPUTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("analyze-json", ("analyze", "{path}", "--format", "json")),
    ("analyze-markdown", ("analyze", "{path}", "--format", "markdown")),
    ("analyze-terminal", ("analyze", "{path}", "--format", "terminal")),
    ("ranks-json", ("ranks", "{path}", "--format", "json")),
    ("ranks-terminal", ("ranks", "{path}", "--format", "terminal")),
)


def _is_note(path: Path) -> bool:
    return path.suffix == ".md" or path.name.startswith(".")


def inputs() -> list[str]:
    """Every file and folder a user could point stab at, relative to the checkout."""
    found: set[str] = set()
    for top in (Path("fixtures"), SHARED / "real-logs", SHARED / "pasted-logs"):
        if not (ROOT / top).is_dir():
            continue
        for path in sorted((ROOT / top).rglob("*")):
            rel = Path(os.path.relpath(path, ROOT))
            if any(_is_note(Path(part)) for part in rel.parts[len(top.parts) :]):
                continue
            found.add(str(rel))
    return sorted(found)


def _run_one(rel_path: str) -> dict[str, dict[str, object]]:
    from typer.testing import CliRunner

    from stabilitycli.cli import app

    runner = CliRunner()
    out: dict[str, dict[str, object]] = {}
    env = {"COLUMNS": WIDTH_COLUMNS, "NO_COLOR": "1", "TERM": "dumb"}
    for label, template in OUTPUTS:
        args = [a.replace("{path}", rel_path) for a in template]
        result = runner.invoke(app, args, env=env)
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        out[label] = {
            "exit": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "crash": repr(result.exception) if crashed else None,
        }
    return out


def _init() -> None:
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, help="folder to write the outputs into")
    mode.add_argument("--check", type=Path, help="folder of outputs written earlier")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args()

    os.chdir(ROOT)
    paths = inputs()
    with Pool(args.jobs, initializer=_init) as pool:
        results = dict(zip(paths, pool.map(_run_one, paths, chunksize=4), strict=True))

    target = args.write or args.check
    store = target / "outputs.json"
    if args.write:
        target.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps(results, indent=1, sort_keys=True))
        digest = hashlib.sha256(store.read_bytes()).hexdigest()[:16]
        print(f"wrote {len(paths)} inputs x {len(OUTPUTS)} outputs to {store} (sha256 {digest})")
        return 0
    before = json.loads(store.read_text())
    differing = []
    for path in sorted(before.keys() | results.keys()):
        for label, _ in OUTPUTS:
            if before.get(path, {}).get(label) != results.get(path, {}).get(label):
                differing.append(f"{label} {path}")
    for line in differing:
        print(f"DIFFERS: {line}")
    total = len(before.keys() | results.keys()) * len(OUTPUTS)
    print(f"{total - len(differing)} of {total} outputs identical ({len(paths)} inputs)")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
