"""A misspelt `STAB_LIMIT_*` name is refused with the names there are (issue 33): ignored,
it would leave the limit the user meant to change as it was."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.limits import InputLimits
from tests.conftest import run_fixture


def test_an_unknown_limit_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(StabInputError) as err:
        InputLimits.from_env({"STAB_LIMIT_MAX_INPUT_BYTE": "5"})
    said = str(err.value)
    assert said.startswith("STAB_LIMIT_MAX_INPUT_BYTE: no such limit")
    assert "did you mean STAB_LIMIT_MAX_INPUT_BYTES?" in said
    assert "STAB_LIMIT_SERVER_TOTAL_SECONDS" in said and "STAB_LIMIT_MAX_WALK_DEPTH" in said


def test_known_limit_names_and_other_variables_are_taken() -> None:
    limits = InputLimits.from_env({"STAB_LIMIT_MAX_LINE_BYTES": "100", "STAB_DEBUG": "1"})
    assert limits.max_line_bytes == 100


def test_the_cli_refuses_a_misspelt_limit_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv("STAB_LIMIT_SERVER_SECONDS", "10")
    result = CliRunner().invoke(app, ["analyze", str(run_fixture("plateau"))])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "STAB_LIMIT_SERVER_SECONDS: no such limit" in lines[0]
