"""One error boundary (#12): whatever fails while reading is an input error naming the file,
a bug in stab is one "internal error" line, and nothing ever ends in a traceback with exit 1
(the status CI reads as "instability found")."""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from stabilitycli.core.errors import StabInputError
from tests.conftest import FIXTURES, run_fixture


def _stab(*args: str, env: dict[str, str] | None = None):
    """`stab ARGS` in-process, without the conftest's re-raise: the test looks at the crash."""
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def _no_crash(result) -> None:
    # CliRunner turns an escaped exception into exit 1: a crash must never look like a verdict
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.stdout + result.stderr


def _one_error_line(result) -> str:
    _no_crash(result)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("stab: error: ")
    return lines[0]


def _damaged_arrow(path: Path) -> Path:
    """A valid Arrow IPC file from pyarrow, then one byte of its footer changed: polars
    panics on it (a `PanicException`, which derives from BaseException)."""
    pa = pytest.importorskip("pyarrow")
    from pyarrow import ipc

    table = pa.table({"step": list(range(100)), "loss": [1.0 / (i + 1) for i in range(100)]})
    with ipc.new_file(str(path), table.schema) as writer:
        writer.write_table(table)
    data = bytearray(path.read_bytes())
    data[len(data) - 175] = 224  # a buffer offset in the footer's record-batch block
    path.write_bytes(bytes(data))
    return path


def test_a_corrupt_arrow_footer_is_one_input_error_naming_the_file(tmp_path) -> None:
    path = _damaged_arrow(tmp_path / "metrics.arrow")
    line = _one_error_line(_stab("analyze", path))
    assert str(path) in line
    assert "internal error" not in line


class PanicException(BaseException):
    """Stands in for pyo3's PanicException: a BaseException, so `except Exception` misses it."""


def _polars_panic(message: str) -> BaseException:
    """The real thing, as polars raises it from Rust (pyo3_runtime.PanicException)."""
    from polars.exceptions import PanicException as Panic

    return Panic(message)


def _raising(err: BaseException):
    def read(*args, **kwargs):
        raise err

    return read


@pytest.mark.parametrize(
    ("err", "said"),
    [
        (PanicException("called `Option::unwrap()` on a `None` value"), "cannot parse jsonl"),
        (_polars_panic("madvise: Invalid argument (os error 22)"), "damaged data (madvise"),
        (RecursionError("maximum recursion depth exceeded"), "nested too deeply"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "cannot parse jsonl"),
        (json.JSONDecodeError("bad\nline", "{", 0), "cannot parse jsonl: JSONDecodeError: bad"),
    ],
)
def test_what_a_decoder_raises_in_a_reader_is_an_input_error(monkeypatch, err, said) -> None:
    from stabilitycli.ingest import read

    path = run_fixture("plateau")
    monkeypatch.setattr("stabilitycli.ingest.jsonl.reader.read", _raising(err))
    with pytest.raises(StabInputError) as caught:
        read(path)
    assert caught.value.path == str(path)
    assert said in caught.value.reason
    assert caught.value.__cause__ is err  # kept for --debug


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_ctrl_c_and_exits_are_never_swallowed(monkeypatch, stop) -> None:
    from stabilitycli.ingest import read

    monkeypatch.setattr("stabilitycli.ingest.jsonl.reader.read", _raising(stop()))
    with pytest.raises(stop):
        read(run_fixture("plateau"))


def test_a_panic_in_a_command_is_exit_2_not_a_crash(monkeypatch) -> None:
    path = run_fixture("plateau")
    monkeypatch.setattr("stabilitycli.ingest.jsonl.reader.read", _raising(PanicException("boom")))
    line = _one_error_line(_stab("analyze", path))
    assert f"{path}: cannot parse jsonl: the decoder failed on damaged data (boom)" in line


@pytest.mark.parametrize(
    "where",
    # reading, and sniffing (opening the file for its first bytes, before any reader)
    ["stabilitycli.ingest.jsonl.reader.read", "stabilitycli.ingest.detect_format"],
)
def test_permission_denied_is_an_input_error(monkeypatch, where) -> None:
    path = run_fixture("plateau")
    denied = PermissionError(errno.EACCES, "Permission denied", str(path))
    monkeypatch.setattr(where, _raising(denied))
    line = _one_error_line(_stab("analyze", path))
    assert line == f"stab: error: {path}: permission denied"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads a mode-000 file"
)
def test_an_unreadable_file_on_disk_says_permission_denied(tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    path.chmod(0)
    try:
        line = _one_error_line(_stab("analyze", path))
    finally:
        path.chmod(0o600)
    assert line == f"stab: error: {path}: permission denied"


def test_a_directory_given_as_a_log_is_an_input_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(
        "stabilitycli.ingest.jsonl.reader.read",
        _raising(IsADirectoryError(errno.EISDIR, "Is a directory", str(tmp_path))),
    )
    path = run_fixture("plateau")
    line = _one_error_line(_stab("analyze", path))
    assert line == f"stab: error: {path}: {tmp_path}: is a directory"


def _inject_bug(monkeypatch) -> None:
    from stabilitycli.detect.registry import RULES, load_rules

    load_rules()

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in a detector")

    monkeypatch.setitem(RULES, "spike", dataclasses.replace(RULES["spike"], run=broken))


def test_a_bug_in_a_detector_is_one_internal_error_line(monkeypatch) -> None:
    monkeypatch.delenv("STAB_DEBUG", raising=False)
    _inject_bug(monkeypatch)
    path = run_fixture("plateau")
    for args in (
        ("analyze", path),
        ("postmortem", path, "-o", "-"),
        ("analyze", path, "-f", "json"),
    ):
        line = _one_error_line(_stab(*args))
        assert "internal error ZeroDivisionError: a bug in a detector" in line
        assert "--debug" in line  # says how to get the traceback


def test_debug_shows_the_traceback_and_still_exits_2(monkeypatch) -> None:
    monkeypatch.delenv("STAB_DEBUG", raising=False)
    _inject_bug(monkeypatch)
    result = _stab("--debug", "analyze", run_fixture("plateau"))
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert "ZeroDivisionError: a bug in a detector" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("stab: error: ")


def test_debug_shows_what_a_reader_raised(monkeypatch) -> None:
    monkeypatch.setattr(
        "stabilitycli.ingest.jsonl.reader.read", _raising(PanicException("deep down"))
    )
    result = _stab("--debug", "analyze", run_fixture("plateau"))
    assert result.exit_code == 2
    assert "PanicException: deep down" in result.stderr
    assert "cannot parse jsonl" in result.stderr.splitlines()[-1]


def test_a_bug_in_a_renderer_is_exit_2_in_every_command(monkeypatch, tmp_path) -> None:
    """Rendering runs outside each command's own try: the app-level boundary catches it."""
    monkeypatch.delenv("STAB_DEBUG", raising=False)

    def broken(*args, **kwargs):
        raise RuntimeError("renderer broke")

    # the commands first: one imported while _common's is broken would keep the broken one
    for module in ("analyze", "analyze_many", "ranks", "compare"):
        monkeypatch.setattr(f"stabilitycli.commands.{module}.print_rendered", broken)
    for module in ("postmortem", "report"):
        monkeypatch.setattr(f"stabilitycli.commands.{module}.write_output", broken)
    monkeypatch.setattr("stabilitycli.commands._common.print_rendered", broken)
    monkeypatch.setattr("stabilitycli.commands._common.write_output", broken)
    monkeypatch.setattr("stabilitycli.commands.explain.explain_text", broken)
    run = str(run_fixture("plateau"))
    cases = [
        ("analyze", run),
        ("analyze", run, run, "-j", "1", "-q"),
        ("analyze", "-r", str(FIXTURES / "runs" / "plateau"), "-j", "1", "-q"),
        ("ranks", str(FIXTURES / "ranks" / "pair_2.jsonl")),
        ("compare", run, run),
        ("postmortem", run, "-o", "-"),
        ("explain", "spike"),
    ]
    if importlib.util.find_spec("plotly") is not None:  # `stab report` needs the extra
        cases.append(("report", run, "-o", str(tmp_path / "report.html")))
    for args in cases:
        line = _one_error_line(_stab(*args))
        assert "internal error RuntimeError: renderer broke" in line, args


def test_a_recursion_error_after_reading_never_escapes(monkeypatch) -> None:
    def deep(*args, **kwargs):
        return deep()

    monkeypatch.setattr("stabilitycli.classify.tree.walk", deep)
    line = _one_error_line(_stab("analyze", run_fixture("plateau")))
    assert "internal error RecursionError" in line


def test_markup_in_names_is_shown_as_written(monkeypatch) -> None:
    """A run, metric or layer name holding rich markup (`[/]` closes nothing and made rich
    raise MarkupError) goes through the terminal renderer as plain text."""
    from stabilitycli.pipeline import run as pipeline

    analyze = pipeline.analyze

    def named(*args, **kwargs):
        analysis = analyze(*args, **kwargs)
        analysis.source.run = "run[/]one [bold]two"
        analysis.findings[:] = [
            dataclasses.replace(f, message=f"layer blocks[/]3: {f.message}")
            for f in analysis.findings
        ]
        return analysis

    monkeypatch.setattr(pipeline, "analyze", named)
    for extra in ((), ("-v",), ("-q",)):
        result = _stab("analyze", run_fixture("spike-lr-jump"), *extra)
        _no_crash(result)
        assert result.exit_code in (0, 1), result.stderr
        assert "stab: error" not in result.stderr
    assert "layer blocks[/]3" in _stab("analyze", run_fixture("spike-lr-jump"), "-v").stdout


def test_control_characters_in_an_error_stay_on_one_line(monkeypatch) -> None:
    monkeypatch.setattr(
        "stabilitycli.ingest.jsonl.reader.read",
        _raising(StabInputError("evil\nname\x1b[2J", "bad\rthing")),
    )
    line = _one_error_line(_stab("analyze", run_fixture("plateau")))
    assert "\x1b" not in line and "\r" not in line
    assert "evil\\nname\\x1b[2J" in line


def test_a_file_name_with_a_newline_is_one_error_line_among_many_runs(tmp_path) -> None:
    bad = tmp_path / "bad\nname\x1b[2J.jsonl"
    bad.write_text("not a log at all\n")
    result = _stab("analyze", str(run_fixture("plateau")), str(bad), "-j", "1", "-q")
    _no_crash(result)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("stab: error: ")]
    assert len(errors) == 1
    assert "bad\\nname\\x1b[2J.jsonl" in errors[0]
    assert "\x1b" not in result.stderr


def test_debug_lasts_one_invocation(monkeypatch) -> None:
    monkeypatch.delenv("STAB_DEBUG", raising=False)
    _inject_bug(monkeypatch)
    assert "Traceback" in _stab("--debug", "analyze", run_fixture("plateau")).stderr
    line = _one_error_line(_stab("analyze", run_fixture("plateau")))
    assert "internal error ZeroDivisionError" in line
