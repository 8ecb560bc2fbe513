"""How big `stab report` is for every fixture, with the plotting library and without it.

    .venv/bin/python scripts/report_sizes.py [--all]

For each log under fixtures/runs/*/, fixtures/torch-runs/*/ and each rank log under
fixtures/ranks/ that `stab report` reads, the page is rendered as `--js inline` (one
offline file) and as `--js beside` (the page alone; plotly.js is one shared file next to
it). Prints min / median / max over the fixtures and the three largest pages; `--all`
adds one row per fixture. Nothing is written to disk.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _kb(n: float) -> str:
    return f"{n / 1000:,.1f} kB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="one row per fixture too")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)  # the same settings lookup as a user running `stab report` here
    from stabilitycli.commands._common import load_and_analyze
    from stabilitycli.report.html import library_file_name, plotly_js, render
    from stabilitycli.report.plotdata import build

    # the same fixture list the browser test renders, so the sizes are of those pages
    from tests.report.test_html_every_fixture import FIXTURE_LOGS

    library = len(plotly_js().encode("utf-8"))
    rows = []
    for name, log in FIXTURE_LOGS.items():
        data, analysis, thresholds = load_and_analyze(str(log.relative_to(ROOT)))
        plots = build(analysis, data, thresholds)
        inline = len(render(analysis, plots).encode("utf-8"))
        beside = len(render(analysis, plots, js_src=library_file_name()).encode("utf-8"))
        rows.append((name, inline, beside))

    print(f"plotly.js ({library_file_name()}): {library:,} bytes ({_kb(library)})")
    print(f"{len(rows)} fixtures; bytes per report page (each column's own min / median / max)\n")
    print(f"{'':10}{'inline (one file)':>20}{'--js beside (page only)':>26}")
    for label, pick in (("min", min), ("median", statistics.median), ("max", max)):
        inl, bes = pick(r[1] for r in rows), pick(r[2] for r in rows)
        print(f"{label:10}{inl:>20,.0f}{bes:>26,.0f}")
    print("\nlargest three (beyond the library):")
    for name, inline, beside in sorted(rows, key=lambda r: -r[2])[:3]:
        print(f"  {name:40} {beside:>10,} bytes beside, {inline:>11,} inline")
    if args.all:
        print(f"\n{'fixture':40} {'inline':>11} {'beside':>10}")
        for name, inline, beside in rows:
            print(f"{name:40} {inline:>11,} {beside:>10,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
