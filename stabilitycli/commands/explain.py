"""`stab explain`: documentation straight from the rule registry and the tree's data.

Registered by `cli.py` as `app.command("explain")(command)`. Exit status: 0, or
2 for a code no rule, verdict or cause has.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Annotated

import typer

from stabilitycli.commands._common import fail
from stabilitycli.errors import StabUsageError

if TYPE_CHECKING:
    from stabilitycli.config import Thresholds


def command(
    code: Annotated[
        str | None,
        typer.Argument(
            help="A rule, finding or verdict code; 'thresholds'; or nothing for the list."
        ),
    ] = None,
) -> None:
    """Print the documentation of a rule, finding code or verdict."""
    from stabilitycli.config import load_config

    try:
        # the questions, verdicts and remedies state the thresholds a run here would use
        typer.echo(explain_text(code, load_config()))
    except StabUsageError as err:
        raise fail(str(err)) from None


def explain_text(code: str | None, thresholds: Thresholds | None = None) -> str:
    """The text of `stab explain CODE`; thresholds stated are `thresholds` (default: defaults)."""
    # imported here: `stab --help` imports this module to register the command
    from stabilitycli.classify.questions import cause_texts, questions, remedies, verdicts
    from stabilitycli.config import Thresholds
    from stabilitycli.detect.registry import load_rules

    in_force = thresholds or Thresholds()
    question_texts, verdict_texts = questions(in_force), verdicts(in_force)
    remedy_texts, cause_text = remedies(in_force), cause_texts(in_force)
    rules = load_rules()
    if not code:
        lines = ["Rules (run `stab explain CODE`):"]
        for rule in rules.values():
            emits = ", ".join(c for c in rule.emits if c != rule.code)
            lines.append(
                f"  {rule.code:<20} §{rule.section}  {rule.summary_for(in_force)}"
                + (f"  [emits: {emits}]" if emits else "")
            )
        lines.append("\nVerdicts:")
        for verdict, (_section, severity, text) in verdict_texts.items():
            lines.append(f"  {verdict:<20} {severity:<8} {text}")
        lines.append("\nQuestions of the tree: `stab explain questions` (or a question, e.g. Q2.1)")
        lines.append("Thresholds: `stab explain thresholds`")
        return "\n".join(lines)
    if code == "questions":
        return "\n".join(f"{q:<5} {text}" for q, text in question_texts.items())
    if code in question_texts:
        return f"{code}: {question_texts[code]}"
    if code == "thresholds":
        defaults = Thresholds()
        return "\n".join(
            f"{f.name} = {getattr(defaults, f.name)!r}\n    {Thresholds.describe(f.name)}"
            for f in fields(Thresholds)
        )
    for rule in rules.values():
        if code == rule.code or code in rule.emits:
            header = f"{rule.code} (§{rule.section}): {rule.summary_for(in_force)}"
            if code != rule.code:
                header = f"{code}: a finding of rule {header}"
            return f"{header}\n\n{rule.doc}"
    if code in verdict_texts:
        section, severity, text = verdict_texts[code]
        remedy = "\n".join(f"  - {r}" for r in remedy_texts.get(code, []))
        return f"verdict {code} (section {section or '-'}, {severity}): {text}" + (
            f"\n\nRemedy:\n{remedy}" if remedy else ""
        )
    if code in cause_text:
        remedy = "\n".join(f"  - {r}" for r in remedy_texts.get(code, []))
        return f"cause {code}: {cause_text[code]}\n\nRemedy:\n{remedy}"
    raise StabUsageError(f"unknown code {code!r}; `stab explain` lists them all")
