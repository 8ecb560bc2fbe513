"""docs/contract.md names every key and code that `stab`'s JSON outputs carry.

Every fixture run (each folder of fixtures/runs, each entry of fixtures/ranks, and the
log on which each rule fires) is analysed and rendered as `stab analyze --format json`
renders it; every key and code found there must be written in backticks in the section of
docs/contract.md that describes it. The closed lists (verdict codes, causes, finding codes,
question ids, readers) are also checked against the code, so a code no fixture happens to
show is still one the page must list.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, RUNS, run_fixture

CONTRACT = ROOT / "docs" / "contract.md"
# a per-rank folder whose file names need a pattern to give their ranks
RANK_PATTERNS = {"custom_names": r"gpu(\d+)"}


def _inputs() -> list[tuple[Path, str | None]]:
    runs = [(run_fixture(d.name), None) for d in sorted(RUNS.iterdir()) if d.is_dir()]
    ranks = [(p, RANK_PATTERNS.get(p.name)) for p in sorted((FIXTURES / "ranks").iterdir())]
    rules = [(p, None) for p in sorted((FIXTURES / "rules").glob("*/fires"))]
    return runs + ranks + rules


@cache
def documents() -> tuple[dict, ...]:
    """The `stab.analysis/1` document of every input, as the JSON renderer writes it."""
    from stabilitycli.core.config import Thresholds
    from stabilitycli.ingest.options import ReadOptions
    from stabilitycli.pipeline import run as pipeline
    from stabilitycli.report.formats import Format

    out = []
    for path, pattern in _inputs():
        analysis = pipeline.analyze(
            str(path), Thresholds(), options=ReadOptions(rank_pattern=pattern)
        )
        out.append(json.loads(Format.json.render(analysis)))
    return tuple(out)


def batch_lines(tmp: Path) -> tuple[dict, ...]:
    """JSON Lines of several runs: one read with a threshold changed (so `settings` shows),
    one that cannot be read (a `stab.error/1` record)."""
    from stabilitycli.pipeline.batch import BatchSettings, analyze_one
    from stabilitycli.report.formats import Format

    settings = BatchSettings(set_values={"spike_sigma": "4"})
    results = [
        analyze_one(str(run_fixture("spike-lr-jump")), settings),
        analyze_one(str(tmp / "missing.jsonl"), settings),
    ]
    return tuple(json.loads(line) for line in Format.json.render_many(results).splitlines())


def section(title: str) -> str:
    """The text under the first heading that contains `title`, up to the next heading of
    the same or a higher level (headings inside code blocks are not headings)."""
    lines = CONTRACT.read_text().splitlines()
    fenced = False
    start, level = None, 0
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        heading = re.match(r"(#+) ", line) if not fenced else None
        if heading is None:
            continue
        if start is not None and len(heading.group(1)) <= level:
            return "\n".join(lines[start:i])
        if start is None and title in line:
            start, level = i, len(heading.group(1))
    assert start is not None, f"docs/contract.md has no heading with {title!r}"
    return "\n".join(lines[start:])


def named(text: str) -> set[str]:
    """Names written in backticks: each span whole, and each of its words
    (`source.rows_used` names source and rows_used; `{check, reason}` both)."""
    spans = re.findall(r"`([^`\n]+)`", text)
    return set(spans) | {word for span in spans for word in re.split(r"[^\w\-]+", span) if word}


def undocumented(found: set, title: str) -> list[str]:
    """What the section does not name anywhere."""
    return sorted(str(name) for name in found - named(section(title)) if name is not None)


def without_row(found: set, title: str) -> list[str]:
    """What has no row of its own in the section's tables (named in a row's first cell):
    a key or a code that is only mentioned in passing is not documented."""
    firsts = "\n".join(
        line.strip().strip("|").split("|")[0]
        for line in section(title).splitlines()
        if line.startswith("|")
    )
    return sorted(str(name) for name in found - named(firsts) if name is not None)


def keys(objects: Iterator[dict]) -> set[str]:
    return {key for obj in objects for key in obj}


def table_rows(title: str) -> dict[str, list[str]]:
    """First cell (its backticked name) -> the other cells, for each row of a section's table."""
    rows = {}
    for line in section(title).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = re.fullmatch(r"`([^`]+)`", cells[0]) if line.startswith("|") else None
        if first:
            rows[first.group(1)] = cells[1:]
    return rows


def test_every_top_level_key_is_documented(tmp_path: Path) -> None:
    docs = [*documents(), *batch_lines(tmp_path)[:1]]
    assert "settings" in docs[-1]  # the changed threshold shows, so its key is checked too
    assert without_row(keys(iter(docs)), "Top-level keys") == []
    coverage = [d["coverage"] for d in docs]
    settings = [s for d in docs for s in d.get("settings", {}).get("non_default", [])]
    nested = (
        keys(iter(coverage))
        | keys(c for cov in coverage for c in cov["not_checked"])
        | keys(s for d in docs for s in d["skipped"])
        | keys(iter(settings))
        | keys(d.get("settings", {}) for d in docs)
    )
    assert undocumented(nested, "Top-level keys") == []


def test_every_source_key_is_documented() -> None:
    from stabilitycli.ingest import READERS

    sources = [d["source"] for d in documents()]
    assert without_row(keys(iter(sources)), "### `source`") == []
    found = (
        keys(r for s in sources for r in s["restarts"])
        | keys(r for s in sources for r in s["rejected"])
        | set(READERS)
    )
    assert undocumented(found, "### `source`") == []


def test_every_verdict_key_is_documented() -> None:
    verdicts = [d["verdict"] for d in documents()]
    assert without_row(keys(iter(verdicts)), "### `verdict`") == []
    assert undocumented(keys(p for v in verdicts for p in v["path"]), "### `verdict`") == []


def test_every_finding_key_is_documented() -> None:
    findings = [f for d in documents() for f in d["findings"]]
    assert without_row(keys(iter(findings)), "### `findings[]`") == []
    quantity_keys = keys(q for f in findings for q in f["quantities"])
    assert undocumented(quantity_keys, "### `findings[]`") == []


def test_every_verdict_code_is_listed_with_its_section_and_severity() -> None:
    from stabilitycli.classify.questions import VERDICTS

    seen = {d["verdict"]["code"] for d in documents()}
    assert without_row(seen | set(VERDICTS), "Verdict codes") == []
    declared = {code: (section or "none", level) for code, (section, level, _) in VERDICTS.items()}
    listed = {code: (cells[0], cells[1]) for code, cells in table_rows("Verdict codes").items()}
    assert listed == declared


def test_every_cause_is_listed() -> None:
    from stabilitycli.classify.questions import CAUSE_TEXT

    seen = {d["verdict"]["cause"] for d in documents()}
    assert seen - {None}, "no fixture has a cause: the check would prove nothing"
    assert without_row(seen, "### Causes") == []
    # the causes that only pick remedies are explained in the prose below the table
    assert undocumented(set(CAUSE_TEXT), "### Causes") == []


def test_every_finding_code_is_listed_under_its_rule() -> None:
    from stabilitycli.detect.registry import load_rules

    emitted = {code: rule.code for rule in load_rules().values() for code in rule.emits}
    seen = {f["code"] for d in documents() for f in d["findings"]}
    # a code a fixture shows that no rule declares would be missing from `stab explain` too
    assert seen <= set(emitted)
    listed = {code: cells[0] for code, cells in table_rows("Finding codes").items()}
    assert listed == {code: f"`{rule}`" for code, rule in emitted.items()}


def test_every_question_id_is_listed() -> None:
    from stabilitycli.classify.questions import QUESTIONS

    seen = {p["question"] for d in documents() for p in d["verdict"]["path"]}
    assert undocumented(seen | set(QUESTIONS), "Questions in `verdict.path`") == []


def test_every_ranks_key_is_documented() -> None:
    from stabilitycli.detect.ranks.report import KINDS

    reports = [d["ranks"] for d in documents() if d.get("ranks")]
    assert any(r["outliers"] for r in reports) and any(r["mean_effect"] for r in reports)
    assert {r["schema"] for r in reports} == {"stab.ranks/1"}
    title = "`stab ranks`: `stab.ranks/1`"
    outliers = keys(o for r in reports for o in r["outliers"])
    assert without_row(keys(iter(reports)) | outliers, title) == []
    found = (
        keys(r["mean_effect"] for r in reports if r["mean_effect"])
        | {o["kind"] for r in reports for o in r["outliers"]}
        | set(KINDS)
    )
    assert undocumented(found, title) == []


def test_every_json_lines_record_is_documented(tmp_path: Path) -> None:
    lines = batch_lines(tmp_path)
    assert [line["schema"] for line in lines] == ["stab.analysis/1", "stab.error/1"]
    found = keys(iter(lines[1:])) | keys(iter([lines[1]["source"]])) | {"stab.error/1"}
    assert undocumented(found, "Many runs: JSON Lines") == []


def test_every_exit_status_is_documented() -> None:
    from stabilitycli.core.exit_codes import ExitCode

    # the first cell of each row of the table: the status
    statuses = set(re.findall(r"^\| (\d+) \|", section("Exit status"), re.MULTILINE))
    assert {str(int(code)) for code in ExitCode} <= statuses


@pytest.mark.parametrize("schema", ["stab.analysis/1", "stab.ranks/1", "stab.compare/1"])
def test_every_schema_string_is_named(schema: str) -> None:
    assert schema in named(CONTRACT.read_text())
