"""The input limits: one documented setting each, set from the environment."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.limits import InputLimits, limit_hit

DOC = Path(__file__).resolve().parents[2] / "docs" / "limits.md"


def test_every_limit_is_documented_and_nothing_else_is() -> None:
    documented = set(re.findall(r"^\| `(\w+)` \|", DOC.read_text(), flags=re.M))
    assert documented == {spec.name for spec in fields(InputLimits)}


def test_environment_sets_a_limit() -> None:
    limits = InputLimits.from_env(
        {"STAB_LIMIT_MAX_JSON_DEPTH": "8", "STAB_LIMIT_SERVER_TOTAL_SECONDS": "2.5"}
    )
    assert limits.max_json_depth == 8
    assert limits.server_total_seconds == 2.5
    assert limits.max_input_bytes == InputLimits().max_input_bytes


@pytest.mark.parametrize("raw", ["lots", "0", "-3"])
def test_a_bad_limit_is_an_input_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(StabInputError, match="STAB_LIMIT_MAX_WALK_FILES"):
        InputLimits.from_env({"STAB_LIMIT_MAX_WALK_FILES": raw})


def test_the_message_names_the_setting_and_how_to_raise_it() -> None:
    err = limit_hit("run.jsonl.gz", "inflates past 200 MiB", "max_input_bytes", 200 * 1024 * 1024)
    assert str(err) == (
        "run.jsonl.gz: inflates past 200 MiB: over the limit max_input_bytes = 200 MiB "
        "(raise it with STAB_LIMIT_MAX_INPUT_BYTES=...)"
    )
