"""The `stab` app itself: every command registered, and `--version`."""

from __future__ import annotations

import importlib
import importlib.metadata
import json

import stabilitycli
from stabilitycli.cli import COMMANDS
from stabilitycli.pipeline.batch import BatchSettings, analyze_one
from tests.conftest import FIXTURES, run_fixture


def test_version_is_the_package_version(cli) -> None:
    result = cli("--version")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 0
    assert result.stdout == f"stab {stabilitycli.__version__}\n"


def test_installed_metadata_reads_the_same_version() -> None:
    # pyproject.toml takes the version from stabilitycli.__version__ (one place)
    assert importlib.metadata.version("stabilitycli") == stabilitycli.__version__


def test_every_command_module_is_registered(cli) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for name in COMMANDS:
        assert callable(importlib.import_module(f"stabilitycli.commands.{name}").command)
        assert name in result.stdout


BUG = "; this is a bug in stab, not a fault in the input"


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


def _internal_line(where: str) -> str:
    hint = "(run `stab --debug ...` or set STAB_DEBUG=1 for a traceback)"
    return f"stab: error: {where}: internal error RuntimeError: boom{BUG} {hint}\n"


def test_a_bug_is_one_line_in_every_command(cli, monkeypatch) -> None:
    monkeypatch.delenv("STAB_DEBUG", raising=False)
    run = str(run_fixture("plateau"))
    ranks_run = str(FIXTURES / "ranks" / "pair_2.jsonl")
    monkeypatch.setattr("stabilitycli.pipeline.run.analyze", _boom)
    monkeypatch.setattr("stabilitycli.detect.ranks.check.find_rank_outliers", _boom)
    monkeypatch.setattr("stabilitycli.compare.runs.compare", _boom)
    cases = [
        (("analyze", run), run),
        (("postmortem", run, "-o", "-"), run),
        (("ranks", ranks_run), ranks_run),
        (("compare", run, run), f"{run} {run}"),
    ]
    for args, where in cases:
        result = cli(*args)
        assert result.exit_code == 2, args
        assert result.stderr == _internal_line(where), args


def test_stab_debug_shows_the_traceback(cli, monkeypatch) -> None:
    # the traceback goes to stderr before the one line; the exit status is still 2
    monkeypatch.setenv("STAB_DEBUG", "1")
    monkeypatch.setattr("stabilitycli.pipeline.run.analyze", _boom)
    result = cli("analyze", run_fixture("plateau"))
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.endswith(f"internal error RuntimeError: boom{BUG}\n")


def test_a_bug_in_one_of_many_runs_is_that_runs_error(monkeypatch) -> None:
    monkeypatch.setattr("stabilitycli.pipeline.run.analyze", _boom)
    path = str(run_fixture("plateau"))
    result = analyze_one(path, BatchSettings())
    assert result.error == f"{path}: internal error RuntimeError: boom{BUG}"


def test_stab_has_its_allocators_return_freed_memory_at_once() -> None:
    # polars' allocator keeps freed pages for 10 s by default, so one rule's temporaries
    # stacked on the next one's; the console script asks for them back before polars loads
    import os
    import subprocess
    import sys

    from stabilitycli import cli

    code = (
        "import json, os, sys; from stabilitycli import cli; sys.argv = ['stab', '--version'];\n"
        "try: cli.main()\nexcept SystemExit: pass\n"
        "print(json.dumps({k: os.environ.get(k) for k in cli.ALLOCATOR_SETTINGS}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in cli.ALLOCATOR_SETTINGS}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["_RJEM_MALLOC_CONF"] == "dirty_decay_ms:0,muzzy_decay_ms:0"
    assert seen == cli.ALLOCATOR_SETTINGS
    assert seen["POLARS_FORCE_NDJSON_READ_SIZE"] == str(4 << 20)
    # a setting the user made is theirs
    env["_RJEM_MALLOC_CONF"] = "dirty_decay_ms:5000"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert (
        json.loads(done.stdout.strip().splitlines()[-1])["_RJEM_MALLOC_CONF"]
        == "dirty_decay_ms:5000"
    )


def test_a_library_caller_keeps_its_own_allocators() -> None:
    # cli.ALLOCATOR_SETTINGS are the command's only (its comment says why): analysing a run
    # through the library leaves polars and pyarrow their own defaults (polars writes its
    # own _RJEM_MALLOC_CONF when it loads)
    import os
    import subprocess
    import sys

    from stabilitycli import cli

    code = (
        "import json, os; import stabilitycli; from tests.conftest import run_fixture;\n"
        "stabilitycli.analyze(run_fixture('plateau'));\n"
        "names = json.loads(os.environ['WATCH']);\n"
        "print(json.dumps({k: os.environ.get(k) for k in names}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in cli.ALLOCATOR_SETTINGS}
    env["WATCH"] = json.dumps(list(cli.ALLOCATOR_SETTINGS))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(seen[name] != value for name, value in cli.ALLOCATOR_SETTINGS.items()), seen


def test_every_command_fits_on_a_screen() -> None:
    """A command parses, calls the library and renders: its function (signature and
    body) fits on one screen; the steps live in named functions beside it."""
    import inspect

    for name in COMMANDS:
        command = importlib.import_module(f"stabilitycli.commands.{name}").command
        lines, _ = inspect.getsourcelines(inspect.unwrap(command))
        assert len(lines) <= 65, f"stab {name}: {len(lines)} lines"
