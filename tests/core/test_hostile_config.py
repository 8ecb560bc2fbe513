"""Config files and sidecars from a hostile or careless folder (issue 33): parsed with a
depth bound, and a folder stab may not look in is no internal error."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from tests.conftest import run_fixture

DEEP = 100_000


def _stab(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def _no_crash(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "internal error" not in result.stderr, result.stderr


def _log_in(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(run_fixture("plateau"), folder / "run.jsonl"))


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("stab.toml", "a = " + "[" * DEEP + "]" * DEEP + "\n"),
        ("stab.toml", "a = " + "{b=" * DEEP + "1" + "}" * DEEP + "\n"),
        ("pyproject.toml", "[tool.stab]\nx = " + "[" * DEEP + "]" * DEEP + "\n"),
    ],
)
def test_a_config_nested_too_deep_is_one_usage_error(tmp_path, name, text) -> None:
    log = _log_in(tmp_path / "run")
    (tmp_path / "run" / name).write_text(text)
    result = _stab("analyze", log)
    _no_crash(result)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert name in lines[0] and "nested too deep" in lines[0]


def test_a_deep_manifest_beside_a_log_is_skipped_with_a_warning(tmp_path) -> None:
    log = _log_in(tmp_path / "run")
    (tmp_path / "run" / "manifest.json").write_text('{"dtype": ' + "[" * DEEP + "]" * DEEP + "}")
    result = _stab("analyze", log, "--format", "json")
    _no_crash(result)
    assert result.exit_code in (0, 1)
    document = json.loads(result.stdout)
    warnings = " ".join(document["source"]["warnings"])
    assert "manifest.json: JSON nested 100,001 deep, over max_json_depth = 64" in warnings


def test_a_manifest_just_within_the_depth_bound_is_read(tmp_path) -> None:
    log = _log_in(tmp_path / "run")
    (tmp_path / "run" / "manifest.json").write_text(
        json.dumps({"dtype": "bf16", "x": json.loads("[" * 60 + "]" * 60)})
    )
    document = json.loads(_stab("analyze", log, "--format", "json").stdout)
    assert document["source"]["dtype"] == "bf16"


def _unreadable(monkeypatch, folder: Path) -> None:
    """`folder` as a user without search permission sees it: nothing inside can be
    looked at (tests run as root, whom the file system never refuses)."""
    import os

    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if folder in Path(os.fsdecode(path)).parents:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)


def test_an_unreadable_folder_in_the_config_search_is_no_internal_error(
    tmp_path, monkeypatch
) -> None:
    _log_in(tmp_path / "outer")
    _unreadable(monkeypatch, tmp_path / "outer")
    result = _stab("analyze", tmp_path / "outer")
    _no_crash(result)
    assert "Traceback" not in result.stderr


def test_a_log_in_an_unreadable_folder_is_permission_denied(tmp_path, monkeypatch) -> None:
    log = _log_in(tmp_path / "outer")
    _unreadable(monkeypatch, tmp_path / "outer")
    result = _stab("analyze", log)
    _no_crash(result)
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("permission denied"), result.stderr
