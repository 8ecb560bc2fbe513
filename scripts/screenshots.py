"""Remake the two README screenshots from a bundled fixture (spike-long-tail).

    .venv/bin/python scripts/screenshots.py

docs/img/terminal-analyze.svg: `stab analyze` run as a user runs it (a subprocess, 100
columns, colours forced on), its ANSI output turned into SVG by rich's own export.
docs/img/report-spike-long-tail.png: `stab report` of the same run, photographed by
headless Chromium at 1280x1500 (skipped with a note when no chromium is installed, or
with --terminal-only). Run from anywhere; paths in the pictures are relative to the
repository, so nothing of this machine shows. The SVG is byte-for-byte reproducible.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.text import Text

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
RUN = "fixtures/runs/spike-long-tail/run.jsonl"  # relative: it is printed in both pictures
WIDTH = 100
STAB = [sys.executable, "-m", "stabilitycli"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "STAB_DEBUG")}
    # rich colours piped output when FORCE_COLOR is set; COLUMNS fixes the width
    return {**env, "FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": str(WIDTH)}


def terminal(out: Path) -> None:
    args = ["analyze", RUN]
    proc = subprocess.run(
        [*STAB, *args], cwd=ROOT, env=_env(), capture_output=True, text=True, check=False
    )
    if proc.returncode not in (0, 1) or proc.stderr:
        sys.exit(f"stab {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    console = Console(record=True, width=WIDTH, force_terminal=True, file=io.StringIO())
    console.print(Text("$ ", style="bold green") + Text(f"stab {' '.join(args)}", style="bold"))
    console.print(Text.from_ansi(proc.stdout), end="", soft_wrap=True)
    console.save_svg(str(out), title=f"stab {' '.join(args)}")
    print(f"wrote {out.relative_to(ROOT)} (exit status {proc.returncode})")


def report(out: Path) -> None:
    chromium = next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )
    if chromium is None:
        print(f"no chromium on PATH: {out.relative_to(ROOT)} left as it is")
        return
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([*STAB, "report", RUN, "-o", str(page)], cwd=ROOT, check=True)
        shot = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={Path(tmp) / 'profile'}",
            "--virtual-time-budget=15000",
            "--window-size=1280,1500",
            f"--screenshot={out}",
            page.as_uri(),
        ]
        subprocess.run(shot, check=True, capture_output=True, timeout=300)
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--terminal-only", action="store_true", help="only the SVG of the terminal")
    options = parser.parse_args()
    IMG.mkdir(parents=True, exist_ok=True)
    terminal(IMG / "terminal-analyze.svg")
    if not options.terminal_only:
        report(IMG / "report-spike-long-tail.png")


if __name__ == "__main__":
    main()
