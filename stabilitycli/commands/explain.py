"""`stab explain`: documentation straight from the rule registry and the tree's data.

Registered by `cli.py` as `app.command("explain")(command)`. Exit status: 0, or
2 for a code no rule, verdict or cause has.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated

import typer

from stabilitycli.commands._common import fail
from stabilitycli.errors import StabUsageError


def command(
    code: Annotated[
        str | None,
        typer.Argument(
            help="A rule, finding or verdict code; 'thresholds'; or nothing for the list."
        ),
    ] = None,
) -> None:
    """Print the documentation of a rule, finding code or verdict."""
    try:
        typer.echo(explain_text(code))
    except StabUsageError as err:
        raise fail(str(err)) from None


def explain_text(code: str | None) -> str:
    # imported here: `stab --help` imports this module to register the command
    from stabilitycli.classify.questions import CAUSE_TEXT, QUESTIONS, REMEDIES, VERDICTS
    from stabilitycli.config import Thresholds
    from stabilitycli.detect.registry import load_rules

    rules = load_rules()
    if not code:
        lines = ["Rules (run `stab explain CODE`):"]
        for rule in rules.values():
            emits = ", ".join(c for c in rule.emits if c != rule.code)
            lines.append(
                f"  {rule.code:<20} §{rule.section}  {rule.summary}"
                + (f"  [emits: {emits}]" if emits else "")
            )
        lines.append("\nVerdicts:")
        for verdict, (_section, severity, text) in VERDICTS.items():
            lines.append(f"  {verdict:<20} {severity:<8} {text}")
        lines.append("\nQuestions of the tree: `stab explain questions` (or a question, e.g. Q2.1)")
        lines.append("Thresholds: `stab explain thresholds`")
        return "\n".join(lines)
    if code == "questions":
        return "\n".join(f"{q:<5} {text}" for q, text in QUESTIONS.items())
    if code in QUESTIONS:
        return f"{code}: {QUESTIONS[code]}"
    if code == "thresholds":
        defaults = Thresholds()
        return "\n".join(
            f"{f.name} = {getattr(defaults, f.name)!r}\n    {Thresholds.describe(f.name)}"
            for f in fields(Thresholds)
        )
    for rule in rules.values():
        if code == rule.code or code in rule.emits:
            header = f"{rule.code} (§{rule.section}): {rule.summary}"
            if code != rule.code:
                header = f"{code}: a finding of rule {header}"
            return f"{header}\n\n{rule.doc}"
    if code in VERDICTS:
        section, severity, text = VERDICTS[code]
        remedy = "\n".join(f"  - {r}" for r in REMEDIES.get(code, []))
        return f"verdict {code} (section {section or '-'}, {severity}): {text}" + (
            f"\n\nRemedy:\n{remedy}" if remedy else ""
        )
    if code in CAUSE_TEXT:
        remedy = "\n".join(f"  - {r}" for r in REMEDIES.get(code, []))
        return f"cause {code}: {CAUSE_TEXT[code]}\n\nRemedy:\n{remedy}"
    raise StabUsageError(f"unknown code {code!r}; `stab explain` lists them all")
