"""Issue 16 item 7 and item 1's settings: concise lines, full width when piped, --show-settings,
--quiet/--verbose, refused option values, and the thresholds not at their defaults named (with
where they came from) in every output."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.conftest import RUNS, run_fixture

LINE = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+): (?P<code>[a-z0-9-]+) (?P<sev>error|warning|info)"
    r"(?: \[rank \d+\])? step (?P<step>\d+): (?P<msg>\S.*)$"
)
SET_SENTENCE = "spike_sigma = 4 (default 3; from --set spike_sigma=4)"


def ok(result, code=(0, 1)):
    """The command ran (no crash: a crash would also exit 1) and exited as given."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in ((code,) if isinstance(code, int) else code), result.output
    return result


# ---------------------------------------------------------------- --format concise


def test_concise_one_line_per_finding_like_ruff(cli) -> None:
    path = run_fixture("spike-long-tail")
    out = ok(cli("analyze", path, "--format", "concise")).stdout.splitlines()
    doc = json.loads(ok(cli("analyze", path, "--format", "json")).stdout)
    lines = [m for line in out if (m := LINE.match(line))]
    assert len(lines) == len([f for f in doc["findings"] if f["step"] is not None])
    assert all(m["path"] == str(path) for m in lines)
    codes = {(int(m["step"]), m["code"], m["sev"]) for m in lines}
    assert {(f["step"], f["code"], f["severity"]) for f in doc["findings"]} == codes
    assert out[-2].startswith(f"{path}: VERDICT {doc['verdict']['code']}")
    assert out[-1].startswith(f"Found {len(doc['findings'])} finding(s)")


def test_concise_quiet_leaves_out_info_and_the_summary(cli) -> None:
    path = run_fixture("spike-long-tail")
    out = ok(cli("analyze", path, "-f", "concise", "--quiet")).stdout.splitlines()
    assert out and not any(" info " in line for line in out if LINE.match(line))
    assert not any(line.startswith("Found ") for line in out)


def test_concise_many_runs_and_exit_status(cli) -> None:
    result = ok(
        cli(
            "analyze",
            run_fixture("healthy-low-noise"),
            run_fixture("fp16-overflow"),
            "-f",
            "concise",
        ),
        1,
    )
    # the file line of the onset (a JSON line a step, from step 0), then the step itself
    assert f"{run_fixture('fp16-overflow')}:201: fp16-overflow error step 200: " in result.stdout
    assert all("\n" not in line for line in result.stdout.splitlines())


# ---------------------------------------------------------------- settings in every output


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "github", "junit", "concise"])
def test_overridden_threshold_is_named_in_every_format(cli, fmt) -> None:
    out = ok(cli("analyze", run_fixture("spike-long-tail"), "-f", fmt, "--set", "spike_sigma=4"))
    flat = " ".join(out.stdout.replace("│", " ").split())
    assert "Thresholds not at their defaults: " + SET_SENTENCE in flat


def test_overridden_threshold_in_json_and_postmortem(cli) -> None:
    path = run_fixture("spike-long-tail")
    doc = json.loads(ok(cli("analyze", path, "-f", "json", "--set", "spike_sigma=4")).stdout)
    assert doc["settings"] == {
        "non_default": [
            {"name": "spike_sigma", "value": 4.0, "default": 3.0, "source": "--set spike_sigma=4"}
        ]
    }
    pm = ok(cli("postmortem", path, "--set", "spike_sigma=4", "-o", "-"), 0).stdout
    assert SET_SENTENCE in pm


def test_defaults_say_nothing_about_settings(cli) -> None:
    path = run_fixture("spike-long-tail")
    doc = json.loads(ok(cli("analyze", path, "-f", "json")).stdout)
    assert "settings" not in doc
    assert "Thresholds not at their defaults" not in ok(cli("analyze", path)).stdout


def test_a_config_file_above_the_log_is_named_with_its_key(cli, tmp_path) -> None:
    run = tmp_path / "proj" / "runs" / "a"
    shutil.copytree(RUNS / "spike-long-tail", run)
    (tmp_path / "proj" / "pyproject.toml").write_text("[tool.stab]\nspike_sigma = 40\n")
    doc = json.loads(ok(cli("analyze", run, "-f", "json")).stdout)
    [setting] = doc["settings"]["non_default"]
    source = f"{tmp_path / 'proj' / 'pyproject.toml'} [tool.stab] spike_sigma"
    assert setting == {"name": "spike_sigma", "value": 40.0, "default": 3.0, "source": source}
    flat = " ".join(ok(cli("analyze", run)).stdout.replace("│", " ").split())
    assert "spike_sigma = 40 (default 3; from " in flat
    # --set wins over the file, and says so
    shown = ok(cli("analyze", run, "--show-settings", "--set", "spike_sigma=5"), 0).stdout
    assert re.search(r"^spike_sigma\s+5\s+--set spike_sigma=5 \(default 3\)$", shown, re.M)
    shown = ok(cli("analyze", run, "--show-settings"), 0).stdout
    assert re.search(rf"^spike_sigma\s+40\s+{re.escape(source)} \(default 3\)$", shown, re.M)


def test_show_settings_lists_every_threshold(cli) -> None:
    from stabilitycli.core.config import THRESHOLD_NAMES

    out = ok(cli("analyze", run_fixture("plateau"), "--show-settings"), 0).stdout.splitlines()
    assert {line.split()[0] for line in out} == THRESHOLD_NAMES
    assert all(line.split()[-1] == "default" for line in out)


# ---------------------------------------------------------------- refused values


def test_unknown_threshold_is_refused_with_the_closest_name(cli) -> None:
    out = ok(cli("analyze", run_fixture("plateau"), "--set", "spike_sigmaa=4"), 2)
    assert "unknown threshold 'spike_sigmaa'; did you mean spike_sigma" in out.output
    assert "`stab explain thresholds` lists them all" in out.output


def test_bad_dtype_is_refused_with_the_choices(cli) -> None:
    out = ok(cli("analyze", run_fixture("plateau"), "--dtype", "fp61"), 2)
    assert "fp32, fp16, bf16" in out.output


def test_quiet_and_verbose_together_are_refused(cli) -> None:
    out = ok(cli("analyze", run_fixture("plateau"), "--quiet", "--verbose"), 2)
    assert "--quiet and --verbose" in out.output


def test_quiet_terminal_is_the_verdict_only(cli) -> None:
    out = ok(cli("analyze", run_fixture("plateau"), "-q")).stdout
    assert "plateau" in out and "Questions asked" not in out and "Findings" not in out


# ---------------------------------------------------------------- plain lines when piped


def test_piped_output_is_plain_lines_of_at_most_100_columns(cli, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    out = ok(cli("analyze", run_fixture("plateau"))).stdout
    doc = json.loads(ok(cli("analyze", run_fixture("plateau"), "-f", "json")).stdout)
    summary = doc["verdict"]["summary"]
    assert len(summary) > 100  # wraps, at 100 columns rather than 80
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert " ".join(summary.split()) in " ".join(out.split())
    assert not any(line.endswith(" ") for line in lines)  # nothing padded to a width
    assert "╭" not in out and "╰" not in out  # no panel border
    many = ok(
        cli(
            "analyze",
            *(run_fixture(n) for n in ("plateau", "fp16-overflow", "loss-scale-collapsed")),
        )
    ).stdout
    header = next(line for line in many.splitlines() if "verdict" in line)
    assert "first bad step" in header and "rows" in header
    assert any("loss-scale-collapsed" in line and "1,500" in line for line in many.splitlines())


def test_compare_names_an_overridden_threshold(cli) -> None:
    from tests.conftest import FIXTURES

    base, rerun = FIXTURES / "compare" / "baseline", FIXTURES / "compare" / "rerun-noise"
    doc = json.loads(
        ok(cli("compare", base, rerun, "-f", "json", "--set", "noise_band_sigmas=4"), 0).stdout
    )
    assert doc["notes"][0] == (
        "Thresholds not at their defaults: noise_band_sigmas = 4 (default 3; "
        "from --set noise_band_sigmas=4)."
    )
    assert doc["metrics"][0]["tolerance"]["sigmas"] == 4.0


def test_html_report_names_an_overridden_threshold(cli, tmp_path) -> None:
    out = tmp_path / "r.html"
    ok(cli("report", run_fixture("spike-long-tail"), "-o", out, "--set", "spike_sigma=4"), 0)
    assert "Thresholds not at their defaults: " + SET_SENTENCE in out.read_text()


def test_ranks_names_an_overridden_threshold(cli) -> None:
    from tests.conftest import FIXTURES

    log = FIXTURES / "ranks" / "two_outliers.jsonl.gz"
    doc = json.loads(ok(cli("ranks", log, "-f", "json", "--set", "rank_z=8")).stdout)
    assert doc["notes"][0] == (
        "Thresholds not at their defaults: rank_z = 8 (default 6; from --set rank_z=8)."
    )
