"""Snapshots of each command in each medium (#37): piped with no COLUMNS (plain lines of
at most 100 columns), piped at COLUMNS=80 (panels at 80), and on a pseudo-terminal
(panels at its width, colour). When a change is meant:

    .venv/bin/python -m pytest tests/commands/test_medium_snapshots.py --snapshot-update
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.commands.test_command_snapshots import _scrubbed
from tests.conftest import ROOT

RUNS, RANKS = "fixtures/runs", "fixtures/ranks"
CASES: dict[str, tuple[str, ...]] = {
    "analyze": ("analyze", f"{RUNS}/spike-long-tail/run.jsonl"),
    "ranks": ("ranks", f"{RANKS}/seed_64"),
    "compare": ("compare", f"{RUNS}/spike-long-tail/run.jsonl", "fixtures/compare/baseline"),
    "postmortem-path": ("postmortem", f"{RUNS}/plateau/run.jsonl", "-o", "{tmp}/pm.md"),
    "report-path": ("report", f"{RUNS}/plateau/run.jsonl", "-o", "{tmp}/r.html", "--js", "cdn"),
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _args(case: str, tmp: str) -> list[str]:
    return [a.replace("{tmp}", tmp) for a in CASES[case]]


def _piped(case: str, tmp_path, columns: str | None) -> str:
    from stabilitycli.cli import app

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        env = {"COLUMNS": columns, "NO_COLOR": None, "FORCE_COLOR": None, "STAB_DEBUG": None}
        result = CliRunner().invoke(app, _args(case, str(tmp_path)), env=env)
    finally:
        os.chdir(cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    out = _scrubbed(result.stdout + result.stderr).replace(str(tmp_path), "<tmp>")
    return f"exit_code: {result.exit_code}\n{out}"


@pytest.mark.parametrize("case", CASES)
def test_piped_without_columns(case, tmp_path, snapshot) -> None:
    text = _piped(case, tmp_path, None)
    assert not ANSI.search(text)
    assert text == snapshot


@pytest.mark.parametrize("case", CASES)
def test_piped_at_80_columns(case, tmp_path, snapshot) -> None:
    text = _piped(case, tmp_path, "80")
    assert max(len(line) for line in text.splitlines()) <= 80
    assert text == snapshot


def _on_a_terminal(args: list[str], columns: int = 90) -> str:
    """`stab ARGS` with stdout on a pseudo-terminal `columns` wide."""
    import fcntl
    import pty
    import struct
    import termios

    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR")}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color")
    proc = subprocess.Popen(
        [sys.executable, "-m", "stabilitycli", *args],
        stdout=child,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(main)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["analyze", "ranks", "compare"])
def test_on_a_pseudo_terminal(case, tmp_path, snapshot) -> None:
    raw = _on_a_terminal(_args(case, str(tmp_path)))
    assert ANSI.search(raw)  # colour on a terminal
    text = ANSI.sub("", raw)
    assert max(len(line) for line in text.splitlines()) <= 90
    if case != "ranks":  # the verdict in its panel (ranks has none)
        assert text.lstrip().startswith("╭")
    assert _scrubbed(text) == snapshot


@pytest.mark.parametrize("columns", [None, "80"])
def test_summary_piped(columns, tmp_path, snapshot) -> None:
    """`stab summary` over a store a sweep of the run fixtures wrote: piped plain lines, or
    panels at COLUMNS=80; it exits by the worst verdict it shows (#37)."""
    from stabilitycli.cli import app

    store = tmp_path / "store"
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        env = {"COLUMNS": columns, "NO_COLOR": None, "FORCE_COLOR": None, "STAB_DEBUG": None}
        sweep = CliRunner().invoke(app, ["analyze", "-r", RUNS, "--results", str(store)], env=env)
        assert sweep.exception is None or isinstance(sweep.exception, SystemExit)
        result = CliRunner().invoke(app, ["summary", str(store)], env=env)
    finally:
        os.chdir(cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 1  # the sweep holds unhealthy runs
    text = _scrubbed(result.stdout + result.stderr).replace(str(tmp_path), "<tmp>")
    # the sweep's own time
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+\d:Z]*", "<time>", text)
    assert not ANSI.search(text)
    if columns == "80":
        assert max(len(line) for line in text.splitlines()) <= 80
    assert f"exit_code: {result.exit_code}\n{text}" == snapshot
