"""`--help` fits 80 columns (#37): no `<bool>` on a flag, command summaries that end at a
sentence, examples in an epilog that is never cut, options grouped by what they are about."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import COMMANDS, app

COMMANDS_HELP = [[], *([name] for name in COMMANDS)]


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "80", "NO_COLOR": "1"})
    assert result.exit_code == 0 and result.exception is None, result.output
    return result.stdout


@pytest.mark.parametrize("args", COMMANDS_HELP, ids=lambda a: " ".join(["stab", *a]))
def test_help_fits_80_columns_without_bool_or_cut_text(args) -> None:
    text = _help(*args)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "<bool>" not in text and "<str>" not in text and "<list[str]>" not in text
    assert "…" not in text  # nothing cut


def test_command_summaries_end_at_a_sentence() -> None:
    flat = " ".join(_help().replace("│", " ").split())
    for name in COMMANDS:
        module = __import__(f"stabilitycli.commands.{name}", fromlist=["command"])
        summary = " ".join(module.command.__doc__.strip().split("\n\n")[0].split())
        assert summary.endswith(".") and f"{name} {summary}" in flat, name


def test_analyze_groups_its_options_and_keeps_its_examples_whole() -> None:
    text = _help("analyze")
    panels = [line.split("─ ")[1].split(" ─")[0] for line in text.splitlines() if "╭─ " in line]
    assert panels.index("Input") < panels.index("Rules") < panels.index("Output")
    assert "Many runs" in panels
    lines = [line.strip() for line in text.splitlines()]
    assert "stab analyze train.log --pattern 'it=(?P<step>\\d+) L=(?P<loss>\\S+)'" in lines


def test_compare_epilog_gives_the_expect_grammar_whole() -> None:
    flat = " ".join(_help("compare").split())
    assert "--expect 'max(grad_norm)[300:400]<3.0'" in flat
    assert "AGG one of max, min, mean, last" in flat
