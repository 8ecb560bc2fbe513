"""Output that fits where it lands (#37): panels on a terminal, plain lines in a pipe.

The CliRunner's stdout is not a terminal: every test here that invokes the CLI is piped,
as in a CI log, `| less` or `> out.txt`."""

from __future__ import annotations

import io
import re

import pytest

from stabilitycli.report.console import PLAIN_WIDTH, Medium, medium
from stabilitycli.report.formats import Format
from tests.conftest import FIXTURES, REAL_LOGS, RUNS, run_fixture

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PASTED_LOGS = REAL_LOGS.parent / "pasted-logs"


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    "tty, env, expected",
    [
        (True, {}, Medium(None, panels=True, colour=True)),
        (True, {"NO_COLOR": "1"}, Medium(None, panels=True, colour=False)),
        (True, {"COLUMNS": "70"}, Medium(70, panels=True, colour=True)),
        (False, {}, Medium(PLAIN_WIDTH, panels=False, colour=False)),
        (False, {"FORCE_COLOR": "1"}, Medium(PLAIN_WIDTH, panels=False, colour=True)),
        (False, {"FORCE_COLOR": "1", "NO_COLOR": "1"}, Medium(100, panels=False, colour=False)),
        (False, {"COLUMNS": "80"}, Medium(80, panels=True, colour=False)),
        (False, {"COLUMNS": "wide"}, Medium(PLAIN_WIDTH, panels=False, colour=False)),
    ],
)
def test_one_function_decides_the_medium(tty, env, expected) -> None:
    assert medium(_Stream(tty), env=env) == expected


def test_a_width_asked_for_keeps_the_panels_in_a_pipe() -> None:
    assert medium(_Stream(False), width=120, env={}) == Medium(120, panels=True, colour=False)


@pytest.mark.parametrize("output", [f.value for f in Format])
def test_every_format_piped_has_no_colour_and_no_padding(cli, output) -> None:
    out = cli("analyze", run_fixture("spike-long-tail"), "-f", output)
    assert out.exit_code in (0, 1), out.output
    assert not ANSI.search(out.stdout)
    lines = out.stdout.splitlines()
    assert lines
    if output == "terminal":
        assert max(len(line) for line in lines) <= PLAIN_WIDTH
        assert not any(line.endswith(" ") for line in lines)
        assert not any(ch in out.stdout for ch in "╭╮╰╯")
        assert lines[0].startswith("spike-recoverable")


def test_force_color_colours_a_pipe_and_no_color_wins(cli, monkeypatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert ANSI.search(cli("analyze", run_fixture("plateau")).stdout)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ANSI.search(cli("analyze", run_fixture("plateau")).stdout)


def test_stab_width_lays_the_panels_out_at_that_width(cli) -> None:
    out = cli("--width", "80", "analyze", run_fixture("spike-long-tail")).stdout
    lines = out.splitlines()
    assert lines[0].startswith("╭") and len(lines[0]) == 80
    assert max(len(line) for line in lines) <= 80
    # the width is that invocation's only
    assert "╭" not in cli("analyze", run_fixture("spike-long-tail")).stdout


def _logs() -> list:
    """Every bundled run, rule fixture and rank fixture, and every real and pasted log."""
    found = sorted(p for p in RUNS.glob("*/run.jsonl*"))
    found += sorted(p for p in (FIXTURES / "rules").glob("*/*") if p.is_dir())
    found += sorted((FIXTURES / "ranks").iterdir())
    for shared in (REAL_LOGS, PASTED_LOGS):
        if shared.is_dir():
            found += sorted(
                p
                for p in shared.rglob("*")
                if p.is_file() and p.suffix != ".md" and "tfevents" not in p.name
            )
            found += sorted({p.parent for p in shared.rglob("*tfevents*")})
    return found


def _prose_over(text: str, width: int) -> list[str]:
    """Lines wider than `width` that are not table rows (a table is as wide as its content)."""
    return [line for line in text.splitlines() if len(line) > width and line[:1] not in "│┃┡┏└"]


def test_no_prose_line_over_100_columns_piped_for_any_log(cli) -> None:
    logs = _logs()
    assert len(logs) > 100
    wide: list[str] = []
    for log in logs:
        for command in ("analyze", "ranks"):
            out = cli(command, log)
            wide += [f"{command} {log}: {line}" for line in _prose_over(out.stdout, 100)]
    assert not wide, "\n".join(wide[:10])


def test_trailing_spaces_go_as_the_pattern_takes_them() -> None:
    # plain text is stripped line by line, not by the pattern (#40): the same text either way
    from stabilitycli.report import console

    texts = [
        "a   \n  b\n\n   \nc d  ",
        "│ Q1.1 │ no      │ evidence      │  \n" * 3,
        "\x1b[1mhealthy\x1b[0m  \x1b[2m  \x1b[0m\nx  \x1b[0m",
        "tab\t \n\u00a0 \n",
    ]
    for text in texts:
        assert console._without_trailing_spaces(text) == console._trailing().sub(r"\1", text)
