"""JUnit XML for CI test reporters: one testcase per rule, a failure per finding.

A finding at or above `fail_on` (the same threshold as the exit status) is a
`<failure>`; lower warnings and infos go to the testcase's `<system-out>`, so
they are visible without failing the build. A rule that could not answer is
`<skipped>` with its reason. A `verdict` testcase carries the headline.
ElementTree does the XML escaping; every string that may quote the input goes
through `escape.xml` first, which shows controls (and so every character XML
1.0 cannot hold) as escapes. The newlines between lines of a body are stab's.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from stabilitycli.core.model import Analysis, Finding, Severity
from stabilitycli.core.settings import sentence
from stabilitycli.detect.kinds.ranks import RULE as RANK_RULE
from stabilitycli.report import escape


def _x(text: object) -> str:
    return escape.xml(text)


def _lines(*lines: object) -> str:
    return "\n".join(_x(line) for line in lines)


def testsuite(analysis: Analysis, fail_on: Severity = Severity.ERROR) -> ET.Element:
    """One `<testsuite>` for one run."""
    from stabilitycli.detect.registry import load_rules

    rules = load_rules()
    names = list(rules)
    if analysis.source.ranks:
        names.insert(0, RANK_RULE)
    by_rule: dict[str, list[Finding]] = {}
    for f in analysis.findings:
        name = f.kind.rule  # each finding reports under the rule that emits it
        by_rule.setdefault(name, []).append(f)
        if name not in names:
            names.append(name)
    skipped = {s.code: s.reason for s in analysis.skipped}
    run = analysis.source.run or analysis.source.path
    suite = ET.Element("testsuite", name=_x(f"stab: {run}"))
    failures = skips = 0
    settings = sentence(analysis.extras.get("settings"))
    if settings:
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="stab.settings", value=_x(settings))

    verdict = ET.SubElement(suite, "testcase", classname=_x(f"stab.{run}"), name="verdict")
    v = analysis.verdict
    if v.code not in ("healthy", "insufficient-data") and v.severity >= fail_on:
        failures += 1
        node = ET.SubElement(verdict, "failure", message=_x(f"{v.code}: {v.summary}"), type=v.code)
        node.text = _lines(
            v.summary,
            *([settings] if settings else []),
            *(f"{p.question}: {p.answer} - {p.evidence}" for p in v.path),
            *(f"remedy: {r}" for r in v.remediation),
        )
    else:
        ET.SubElement(verdict, "system-out").text = _lines(
            f"{v.code}: {v.summary}", *([settings] if settings else [])
        )

    for name in names:
        case = ET.SubElement(suite, "testcase", classname=_x(f"stab.{run}"), name=_x(name))
        found = by_rule.get(name, [])
        quiet = []
        for f in found:
            if f.severity >= fail_on:
                failures += 1
                where = f" at step {f.step}" if f.step is not None else ""
                node = ET.SubElement(
                    case, "failure", message=_x(f"{f.code}{where}: {f.message}"), type=_x(f.code)
                )
                node.text = _lines(
                    f"{f.severity} {f.code}{where}"
                    + (f" rank {f.rank}" if f.rank is not None else ""),
                    f.message,
                )
            else:
                quiet.append(f"{f.severity} {f.code} step {f.step}: {f.message}")
        if not found and name in skipped:
            skips += 1
            ET.SubElement(case, "skipped", message=_x(skipped[name]))
        if quiet:
            ET.SubElement(case, "system-out").text = _lines(*quiet)
    suite.set("tests", str(len(suite.findall("testcase"))))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skips))
    return suite


def wrap(suites: list[ET.Element]) -> str:
    """A `<testsuites>` document around one or more suites."""
    root = ET.Element("testsuites", name="stab")
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.extend(suites)
    ET.indent(root)
    return escape.xml_document(ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")


def render(analysis: Analysis, fail_on: Severity = Severity.ERROR) -> str:
    return wrap([testsuite(analysis, fail_on)])


def error_suite(path: str, message: str) -> ET.Element:
    """A run that could not be read: one testcase with an `<error>` (batch mode)."""
    suite = ET.Element(
        "testsuite", name=_x(f"stab: {path}"), tests="1", failures="0", errors="1", skipped="0"
    )
    case = ET.SubElement(suite, "testcase", classname=_x(f"stab.{path}"), name="read")
    ET.SubElement(case, "error", message=_x(message), type="StabInputError")
    return suite
