"""The command line as a user and a CI job meet it: exit codes, errors, options."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import run_fixture


def test_exit_codes_follow_fail_on(cli) -> None:
    assert cli("analyze", run_fixture("healthy-low-noise")).exit_code == 0
    assert cli("analyze", run_fixture("spike-persistent")).exit_code == 1
    recoverable = run_fixture("spike-long-tail")
    assert cli("analyze", recoverable).exit_code == 0  # a recovered spike is a warning
    assert cli("analyze", recoverable, "--fail-on", "warning").exit_code == 1


def test_missing_file_is_one_line_exit_2(cli, tmp_path) -> None:
    result = cli("analyze", tmp_path / "nope.jsonl")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "nope.jsonl" in lines[0] and "Traceback" not in result.stderr


def test_garbage_file_names_the_line(cli, tmp_path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n[1, 2]\n")
    result = cli("analyze", bad)
    assert result.exit_code == 2
    assert "bad.jsonl" in result.stderr and "line 1" in result.stderr


def test_unknown_format_points_to_the_list_in_help(cli, tmp_path) -> None:
    odd = tmp_path / "weights.bin"
    odd.write_bytes(b"\x00\x01\x02binary")
    result = cli("analyze", odd)
    # one line naming the file; the formats are listed once, in `stab analyze --help`
    assert result.exit_code == 2 and "`stab analyze --help` lists the formats" in result.stderr
    assert result.stderr.count("\n") == 1 and str(odd) in result.stderr


def test_metric_override_and_its_report(cli, tmp_path) -> None:
    log = tmp_path / "custom.jsonl"
    rows = [
        {"it": i, "my_objective": 2.0 + (5.0 if i == 300 else 0.0) + 0.001 * (i % 7)}
        for i in range(600)
    ]
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = cli(
        "analyze", log, "--metric", "loss=my_objective", "--step-key", "it", "--format", "json"
    )
    doc = json.loads(result.stdout)
    assert doc["source"]["metrics"]["loss"] == "my_objective"
    assert any(f["code"] == "spike" and f["step"] == 300 for f in doc["findings"])
    bad = cli("analyze", log, "--metric", "loss=missing_key")
    assert bad.exit_code == 2 and "missing_key" in bad.stderr


def test_select_ignore_and_set(cli) -> None:
    path = run_fixture("spike-persistent")
    only_nan = json.loads(cli("analyze", path, "--select", "nan", "--format", "json").stdout)
    assert only_nan["verdict"]["code"] == "healthy"
    ignored = json.loads(cli("analyze", path, "--ignore", "spike", "--format", "json").stdout)
    assert not [f for f in ignored["findings"] if f["code"] == "spike"]
    loose = json.loads(cli("analyze", path, "--set", "spike_sigma=100", "--format", "json").stdout)
    assert not [f for f in loose["findings"] if f["code"] == "spike"]
    assert cli("analyze", path, "--set", "no_such_threshold=1").exit_code == 2
    assert cli("analyze", path, "--ignore", "no-such-code").exit_code == 2


def test_pyproject_tool_stab_table_sets_thresholds(cli, tmp_path) -> None:
    source = run_fixture("spike-long-tail")
    (tmp_path / "run.jsonl").write_bytes(source.read_bytes())
    (tmp_path / "pyproject.toml").write_text("[tool.stab]\nspike_sigma = 100.0\n")
    doc = json.loads(cli("analyze", tmp_path / "run.jsonl", "--format", "json").stdout)
    assert not [f for f in doc["findings"] if f["code"] == "spike"]


def test_explain_reads_the_registry(cli) -> None:
    listing = cli("explain")
    assert listing.exit_code == 0 and "spike" in listing.stdout and "divergence" in listing.stdout
    spike = cli("explain", "spike")
    assert "What it detects" in spike.stdout and "Why it matters" in spike.stdout
    assert "loss-scale-halving" in cli("explain", "loss-scale-halving").stdout
    assert "spike_sigma" in cli("explain", "thresholds").stdout
    assert cli("explain", "nonsense").exit_code == 2


def test_terminal_output_has_headline_path_and_remedy(cli) -> None:
    out = cli("analyze", run_fixture("spike-long-tail")).stdout
    assert (
        "spike-recoverable" in out
        and "Q2.1" in out
        and "Remedy" in out
        and "long-tail-token" in out
    )


def test_stab_starts_without_a_collection() -> None:
    """The console script (`entry.main`) raises the collector's first threshold before typer
    and the CLI are imported: from there `stab --version` runs without one collection (#40)."""
    code = (
        "import gc, sys\n"
        "passes = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and passes.append(info))\n"
        "sys.argv = ['stab', '--version']\n"
        "from stabilitycli.entry import main\n"
        "before = len(passes)\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(len(passes) - before, 'typer' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("stab ")
    assert done.stderr.split() == ["0", "True"]


def test_importing_stab_keeps_the_callers_collector() -> None:
    """Only the command raises the threshold: importing the library, the CLI or the entry
    module leaves the caller's collector as it was."""
    code = (
        "import gc; before = gc.get_threshold()\n"
        "import stabilitycli, stabilitycli.entry, stabilitycli.cli, stabilitycli.core.collector\n"
        "print(gc.get_threshold() == before)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]


def test_cli_module_does_not_import_polars() -> None:
    code = "import sys, stabilitycli.cli; print('polars' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def test_running_out_of_memory_is_said_as_that_not_as_a_bug(cli, monkeypatch) -> None:
    from stabilitycli.pipeline import run as pipeline_run

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 1.81 MiB for an array")

    monkeypatch.setattr(pipeline_run, "analyze", no_memory)
    done = cli("analyze", run_fixture("spike-long-tail"))
    assert done.exit_code == 2
    line = done.output.strip()
    assert "out of memory (Unable to allocate 1.81 MiB for an array)" in line
    assert "docs/limits.md" in line and "a bug in stab" not in line
    assert len(line.splitlines()) == 1
