"""`-h` beside `--help` everywhere, shell completion, and both staying light.

Help and completion run on every `-h` and on every TAB a shell asks to complete, so
neither may import polars, numpy, pydantic, a log reader or the analysis: the import
check runs the real `stab` in a subprocess and looks at `sys.modules` when it exits.
An analysis imports what it uses only: the one reader of its input, its one renderer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import COMMANDS, app
from stabilitycli.ingest.formats import BY_NAME, ENTRIES

runner = CliRunner()


def _invoke(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), prog_name="stab", env=env)


@pytest.mark.parametrize("command", [(), *((name,) for name in COMMANDS)], ids=str)
def test_dash_h_is_help(command: tuple[str, ...]) -> None:
    short = _invoke(*command, "-h")
    # a crash in CliRunner is exit 1 too (our "instability found"): look at the exception
    assert short.exception is None, short.exception
    assert short.exit_code == 0
    assert short.stdout.lstrip().startswith(" ".join(("Usage: stab", *command)))
    assert short.stdout == _invoke(*command, "--help").stdout


def test_help_lists_dash_h_and_completion() -> None:
    out = _invoke("--help").stdout
    for option in ("-h", "--install-completion", "--show-completion"):
        assert option in out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_the_script(shell: str, monkeypatch) -> None:
    # typer's switch to name the shell instead of detecting it from the parent process
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    result = _invoke("--show-completion", shell)
    assert result.exception is None, result.exception
    assert result.exit_code == 0
    # the script asks `stab` itself for the words, through the variable click reads
    assert f"_STAB_COMPLETE=complete_{shell}" in result.stdout
    assert result.stdout.rstrip().rstrip('"').endswith(" stab")


# what neither help nor completion may load (cli.py and commands/ import them lazily)
HEAVY = (
    "polars",
    "numpy",
    # typer converts option values with it; commands/_params.py keeps it for values that need it
    "pydantic",
    "stabilitycli.pipeline",
    "stabilitycli.detect",
    "stabilitycli.classify",
    *(entry.module for entry in ENTRIES),
)

# runs `stab` in-process after the environment is set, then reports what got imported
_PROBE = """
import json, sys
from stabilitycli.cli import main
sys.argv = ["stab", *json.loads(sys.argv[1])]
try:
    main()
finally:
    sys.stderr.write("\\nLOADED " + json.dumps(sorted(m for m in HEAVY if m in sys.modules)))
"""


def _run_stab(
    args: list[str], watch: tuple[str, ...] = HEAVY, **env: str
) -> tuple[subprocess.CompletedProcess, list[str]]:
    code = _PROBE.replace("HEAVY", json.dumps(list(watch)))
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100", **env},
        timeout=120,
    )
    loaded = json.loads(proc.stderr.rpartition("\nLOADED ")[2])
    return proc, loaded


@pytest.mark.parametrize(
    "args", [[], ["--help"], ["-h"], ["analyze", "-h"], ["report", "-h"]], ids=str
)
def test_help_imports_nothing_heavy(args: list[str]) -> None:
    proc, loaded = _run_stab(args)
    assert proc.returncode == (2 if not args else 0)  # bare `stab` prints help, exit 2
    assert "Usage: stab" in proc.stdout
    assert loaded == []


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("stab an", ["analyze"]),
        ("stab analyze --format c", ["concise"]),
        ("stab compare --ex", ["--expect"]),
        # no words offered: the script falls back to the shell's file names
        ("stab analyze fix", []),
    ],
)
def test_a_tab_completes_without_importing_anything_heavy(words: str, expected: list[str]) -> None:
    # what the script from --show-completion bash runs on each TAB
    proc, loaded = _run_stab(
        [],
        _STAB_COMPLETE="complete_bash",
        COMP_WORDS=words,
        COMP_CWORD=str(len(words.split()) - 1),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == expected
    assert loaded == []


# what analysing one log never needs but the reader of its format and the renderer asked for
UNUSED_BY_AN_ANALYSIS = (
    "pydantic",
    "plotly",
    "rich.markdown",
    *(f"stabilitycli.report.{name}" for name in ("html", "markdown", "plotdata", "json_report")),
    *(entry.module for entry in ENTRIES),
)


@pytest.mark.parametrize(
    ("log", "reader"),
    [("fixtures/ranks/seed_64/global.jsonl", "jsonl"), ("fixtures/tensorboard/tf2", "tensorboard")],
)
def test_an_analysis_imports_one_reader_and_one_renderer(log: str, reader: str) -> None:
    proc, loaded = _run_stab(["analyze", log], watch=UNUSED_BY_AN_ANALYSIS)
    assert proc.returncode in (0, 1), proc.stderr
    readers = {name for name, entry in BY_NAME.items() if entry.module in loaded}
    assert reader in readers
    if os.path.isdir(log):
        # a folder is offered to the readers of folders before its own (which import a
        # couple of file readers they build on), never to the readers of text logs
        assert not {entry.name for entry in ENTRIES if entry.takes.text_log} & readers
    else:
        assert readers == {reader}
    assert [m for m in loaded if not m.startswith("stabilitycli.ingest.")] == []


# what `stab analyze` of a small log of one series loads only when it needs it (#40): the
# other commands (built as they are asked for), the per-rank check (a log without ranks
# skips it), and the readers and libraries of other formats
LAZY_FOR_ONE_SERIES = (
    *(f"stabilitycli.commands.{name}" for name in COMMANDS if name != "analyze"),
    *(
        f"stabilitycli.detect.ranks.{name}"
        for name in ("check", "cohort", "report", "decision", "drift", "pair", "change")
    ),
    "pyarrow",
    "pyarrow.parquet",
    "mlflow",
    "pandas",
    "tensorboard",
    "google.protobuf",
    "yaml",
    "pydantic",
    "rich.markdown",
    "ctypes.util",  # malloc_trim is looked up under a memory cap only
    "numpy.ma",  # frame.plain_numpy: a small log's medians, sets and Series without it
    # the kinds' package names its modules; the fits and checks of a rise, a spike, a fall
    # and a failing scaler load with the first log that has one; the mean over ranks
    "pkgutil",
    "stabilitycli.detect.divergence_onset",
    "stabilitycli.detect.bump_end",
    "stabilitycli.detect.bump_excess",
    "stabilitycli.detect.carried_curve",
    "stabilitycli.detect.scaler_failing",
    "stabilitycli.frame.step_means",
)


def test_an_analysis_of_one_series_builds_one_command_and_no_rank_check() -> None:
    proc, loaded = _run_stab(
        ["analyze", "fixtures/runs/healthy-hf-style/run.jsonl"],
        watch=(*LAZY_FOR_ONE_SERIES, "stabilitycli.commands.analyze"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "healthy" in proc.stdout  # the analysis ran and rendered its verdict
    assert loaded == ["stabilitycli.commands.analyze"]


def test_help_builds_and_lists_every_command_in_order() -> None:
    # the commands are built when asked for: `--help` asks for all, in COMMANDS order
    proc, loaded = _run_stab(
        ["--help"], watch=tuple(f"stabilitycli.commands.{n}" for n in COMMANDS)
    )
    assert proc.returncode == 0, proc.stderr
    where = [proc.stdout.index(f" {name} ") for name in COMMANDS]
    assert where == sorted(where)
    assert loaded == sorted(f"stabilitycli.commands.{n}" for n in COMMANDS)
