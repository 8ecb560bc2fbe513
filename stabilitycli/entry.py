"""The `stab` command's entry point (the console script and `python -m stabilitycli`).

It raises the collector's first threshold (`core.collector`), then hands over to
`cli.main()`. Raised here, before typer, click and the CLI's modules are imported, and not
only in `cli.main()`: at the default threshold the collector ran while they were imported,
each pass scanning objects that all survive (some 9 million instructions of a small `stab
analyze`). A library caller never runs this and keeps its own collector.
"""

from __future__ import annotations

from stabilitycli.core.collector import collect_less


def main() -> None:
    collect_less()
    from stabilitycli.cli import main as run

    run()
