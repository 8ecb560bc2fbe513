"""CI renderers (GitHub annotations, JUnit XML, PR-comment Markdown) as pure functions."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from stabilitycli.core.model import Analysis, Finding, PathStep, Severity, Skip, SourceInfo, Verdict
from stabilitycli.report import github, junit, markdown
from tests.conftest import run_fixture

EVIL = '<script>alert("x")</script> & 50%, a|b: c\nsecond line\x01'


def _analysis(path: str = "runs/a,b:c.jsonl", run: str = "exp-1") -> Analysis:
    source = SourceInfo(
        path=path, format="jsonl", run=run, rows_read=100, rows_used=100, first_step=0, last_step=99
    )
    findings = [
        Finding(
            "nan", Severity.ERROR, "loss non-finite from step 40: " + EVIL, step=40, metric="loss"
        ),
        Finding(
            "spike", Severity.WARNING, "loss spike at step 20", step=20, end_step=22, metric="loss"
        ),
        Finding("blip", Severity.INFO, "2 isolated bumps", step=10),
        Finding("rank-outlier", Severity.ERROR, "rank 3 sits at 40.0", step=30, rank=3),
    ]
    verdict = Verdict(
        "nan",
        "log-of-zero",
        "1",
        "Loss went non-finite at step 40.",
        [PathStep("Q1.1", "yes", "step 40 " + EVIL)],
        ["use log_softmax"],
        Severity.ERROR,
    )
    return Analysis(
        source=source,
        verdict=verdict,
        findings=findings,
        skipped=[Skip("loss-scale", "fp32 run: not applicable")],
    )


def _healthy() -> Analysis:
    source = SourceInfo(path="ok.jsonl", format="jsonl", run="ok")
    return Analysis(
        source=source,
        verdict=Verdict("healthy", None, None, "No instability found.", [], [], Severity.INFO),
        findings=[],
        skipped=[],
    )


# ---------------------------------------------------------------- github


def test_github_one_annotation_per_finding_plus_the_verdict() -> None:
    lines = github.render(_analysis()).splitlines()
    assert len(lines) == 1 + 4
    assert lines[0].startswith(
        "::error file=runs/a%2Cb%3Ac.jsonl,title=stab verdict%3A nan (log-of-zero)::"
    )
    levels = [line.split(" ", 1)[0] for line in lines[1:]]
    assert levels == ["::error", "::warning", "::notice", "::error"]
    assert "title=stab rank-outlier at step 30 on rank 3::" in lines[4]


def test_github_escapes_newlines_and_percent() -> None:
    text = github.render(_analysis())
    nan_line = text.splitlines()[1]
    assert "50%25, a|b: c%0Asecond line" in nan_line  # message: %, CR, LF escaped; ':' and ',' kept
    assert len(text.splitlines()) == 5  # the newline in the message did not start a new command


def test_github_healthy_is_a_notice() -> None:
    assert github.render(_healthy()).startswith(
        "::notice file=ok.jsonl,title=stab verdict%3A healthy::"
    )


# ---------------------------------------------------------------- junit


def test_junit_failures_follow_fail_on() -> None:
    root = ET.fromstring(junit.render(_analysis(), Severity.ERROR))
    suite = root.find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert {"verdict", "nan", "spike", "ranks", "loss-scale"} <= set(cases)
    assert len(cases["nan"].findall("failure")) == 1
    assert cases["spike"].find("failure") is None  # a warning below --fail-on error...
    assert "loss spike at step 20" in cases["spike"].find("system-out").text  # ...still shown
    assert cases["ranks"].find("failure") is not None
    assert cases["verdict"].find("failure").get("type") == "nan"
    assert cases["loss-scale"].find("skipped").get("message") == "fp32 run: not applicable"
    assert suite.get("failures") == "3" and root.get("failures") == "3"
    assert int(suite.get("tests")) == len(cases)

    stricter = ET.fromstring(junit.render(_analysis(), Severity.WARNING)).find("testsuite")
    assert stricter.get("failures") == "4"


def test_junit_escapes_markup_and_control_characters() -> None:
    text = junit.render(_analysis())
    assert "<script>" not in text and "&lt;script&gt;" in text
    root = ET.fromstring(text)  # \x01 would make this raise if it had been written through
    message = root.find(".//testcase[@name='nan']/failure").get("message")
    assert '<script>alert("x")</script>' in message


def test_junit_healthy_has_no_failure() -> None:
    root = ET.fromstring(junit.render(_healthy()))
    assert root.get("failures") == "0" and root.find(".//failure") is None


# ---------------------------------------------------------------- markdown


def test_markdown_pr_comment() -> None:
    text = markdown.render(_analysis())
    assert text.startswith("### 🔴 stab: `nan` (cause: `log-of-zero`) — exp-1")
    assert "| Q1.1 | yes |" in text
    assert "<script>" not in text and "&lt;script>" in text
    assert "a\\|b" in text  # a pipe in a log message does not break the table
    rows = [line for line in text.splitlines() if line.startswith(("| 🔴", "| 🟠"))]
    assert len(rows) == 3


def test_markdown_healthy() -> None:
    text = markdown.render(_healthy())
    assert "🟢" in text and "Findings" not in text


# ---------------------------------------------------------------- through the CLI


def test_cli_github(cli) -> None:
    result = cli("analyze", run_fixture("spike-persistent"), "--format", "github")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0].startswith("::error file=")
    assert any(
        line.startswith("::error") and "title=stab spike at step 800" in line
        for line in result.stdout.splitlines()
    )


def test_cli_junit(cli) -> None:
    result = cli(
        "analyze", run_fixture("spike-long-tail"), "--format", "junit", "--fail-on", "warning"
    )
    root = ET.fromstring(result.stdout)
    assert result.exit_code == 1 and int(root.get("failures")) >= 1
    relaxed = ET.fromstring(
        cli("analyze", run_fixture("spike-long-tail"), "--format", "junit").stdout
    )
    assert (
        relaxed.get("failures") == "0"
    )  # a recovered spike is a warning, below the default --fail-on


def test_cli_markdown(cli) -> None:
    result = cli("analyze", run_fixture("healthy-low-noise"), "--format", "markdown")
    assert result.exit_code == 0 and "stab: `healthy`" in result.stdout


def test_cli_json_single_run_unchanged(cli) -> None:
    """One path still prints one indented stab.analysis/1 document, not JSON Lines."""
    result = cli("analyze", run_fixture("spike-long-tail"), "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["schema"] == "stab.analysis/1" and result.stdout.startswith("{\n  ")
