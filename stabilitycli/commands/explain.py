"""`stab explain`: documentation straight from the rule registry and the tree's data.

Registered by `cli.py` as `app.command("explain")(command)`. Exit status: 0, or
2 for a code no rule, verdict or cause has. Every number a text states is the threshold
in force: defaults <- a config file above the working directory <- `--set`.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import fields
from typing import TYPE_CHECKING, Annotated

import typer

from stabilitycli.commands._common import SetOpt, fail, pairs
from stabilitycli.core.errors import StabUsageError

if TYPE_CHECKING:
    from stabilitycli.core.config import Thresholds


def complete_code(incomplete: str) -> list[tuple[str, str]]:
    """What `stab explain <TAB>` offers: every code `explain_text` accepts, with what it is."""
    # imported on a TAB after `explain` only: the registry loads the rule modules
    from stabilitycli.classify.questions import CAUSE_TEXT, QUESTIONS, VERDICTS
    from stabilitycli.detect.registry import load_rules

    kinds: dict[str, list[str]] = {
        "thresholds": ["every threshold and its value"],
        "questions": ["every question of the decision tree"],
    }
    for rule in load_rules().values():
        kinds.setdefault(rule.code, []).append("rule")
        for finding in rule.emits:
            if finding != rule.code:
                kinds.setdefault(finding, []).append(f"finding of rule {rule.code}")
    for names, kind in ((VERDICTS, "verdict"), (CAUSE_TEXT, "cause"), (QUESTIONS, "question")):
        for name in names:
            kinds.setdefault(name, []).append(kind)
    return [(code, ", ".join(what)) for code, what in kinds.items() if code.startswith(incomplete)]


def command(
    code: Annotated[
        str | None,
        typer.Argument(
            help="A rule, finding, verdict or cause code, a question id (Q2.1); 'thresholds', "
            "'questions'; or nothing for the list.",
            autocompletion=complete_code,
        ),
    ] = None,
    set_values: SetOpt = None,
) -> None:
    """Print the documentation of a rule, finding code or verdict, with the thresholds in
    force here (a config file above the working directory, then --set)."""
    from stabilitycli.core.settings import load_settings, sentence

    try:
        # the texts state the thresholds a run here would use, and say which are not defaults
        thresholds, settings = load_settings(None, pairs(set_values, "--set"))
        changed = sentence(settings.to_dict())
        typer.echo(explain_text(code, thresholds) + (f"\n\n{changed}" if changed else ""))
    except StabUsageError as err:
        raise fail(str(err)) from None


def explain_text(code: str | None, thresholds: Thresholds | None = None) -> str:
    """The text of `stab explain CODE`; thresholds stated are `thresholds` (default: defaults).

    A code may be several things at once (`divergence` is a rule, a finding code and a
    verdict; `duplicate-batch` a rule and a cause): every one of them is explained.
    """
    # imported here: `stab --help` imports this module to register the command
    from stabilitycli.classify.questions import (
        cause_texts,
        finding_texts,
        question_next,
        questions,
        verdicts,
    )
    from stabilitycli.core.config import Thresholds
    from stabilitycli.detect.registry import load_rules

    in_force = thresholds or Thresholds()
    question_texts, verdict_texts = questions(in_force), verdicts(in_force)
    rules = load_rules()
    if not code:
        lines = ["Rules (run `stab explain CODE`):"]
        for rule in rules.values():
            emits = ", ".join(c for c in rule.emits if c != rule.code)
            lines.append(
                f"  {rule.code:<20} section {rule.section}  {rule.summary_for(in_force)}"
                + (f"  [emits: {emits}]" if emits else "")
            )
        lines.append("\nVerdicts:")
        for verdict, (_section, severity, text) in verdict_texts.items():
            lines.append(f"  {verdict:<20} {severity:<8} {text}")
        lines.append("\nCauses:")
        for cause, text in cause_texts(in_force).items():
            lines.append(f"  {cause:<20} {text}")
        lines.append("\nQuestions of the tree: `stab explain questions` (or a question, e.g. Q2.1)")
        lines.append("Thresholds: `stab explain thresholds`")
        return "\n".join(lines)
    if code == "questions":
        return "\n".join(f"{q:<5} {text}" for q, text in question_texts.items())
    if code in question_texts:
        return f"{code}: {question_texts[code]}\n\nWhat to do: {question_next(in_force)[code]}"
    if code == "thresholds":
        return "\n".join(_threshold_entry(f.name, in_force) for f in fields(Thresholds))
    parts = [
        *_rule_parts(code, rules, finding_texts(in_force), in_force),
        *_verdict_parts(code, verdict_texts, in_force),
        *_cause_parts(code, cause_texts(in_force), in_force),
    ]
    if not parts:
        raise StabUsageError(f"unknown code {code!r}; `stab explain` lists them all")
    return "\n\n".join(parts)


def _rule_parts(code: str, rules, findings: dict[str, tuple[str, str]], in_force) -> list[str]:
    """The rule that is or emits `code`: its finding in plain words, what to do, its doc."""
    for rule in rules.values():
        if code == rule.code or code in rule.emits:
            header = f"{rule.code} (section {rule.section}): {rule.summary_for(in_force)}"
            if code != rule.code:
                header = f"{code}: a finding of rule {header}"
            parts = [header]
            # the rule's own code names its findings: each in plain words, with what to do
            for finding in [code] if code in findings else rule.emits:
                if finding in findings:
                    meaning, todo = findings[finding]
                    parts.append(f"Finding {finding}: {meaning}.\nWhat to do: {todo}.")
            return [*parts, reflow(plain_words(rule.doc_for(in_force)))]
    return []


def _threshold_entry(name: str, in_force: Thresholds) -> str:
    """`name = value`, the default beside a value that is not it, and what the threshold does."""
    from stabilitycli.core.config import Thresholds

    value, default = getattr(in_force, name), getattr(Thresholds(), name)
    moved = f"  (default {default!r})" if value != default else ""
    return f"{name} = {value!r}{moved}\n    {Thresholds.describe(name)}"


def _verdict_parts(code: str, verdict_texts, in_force: Thresholds) -> list[str]:
    """The verdict `code`: what it means, and its remedies for each cause the table knows."""
    from stabilitycli.classify.remedies import remedy_causes, remedy_rows

    if code not in verdict_texts:
        return []
    section, severity, text = verdict_texts[code]
    out = f"verdict {code} (section {section or '-'}, {severity}): {text}"
    said: dict[tuple, list[str]] = {}  # a row -> the causes it is given for, said once
    for cause in remedy_causes(code):
        said.setdefault(remedy_rows(code, cause), []).append(cause or "none named")
    for causes in said.values():
        todo = _remedy_bullets(code, None if causes == ["none named"] else causes[0], in_force)
        if todo:
            out += f"\n\nWhen the cause is {' or '.join(causes)}, what to do:\n{todo}"
    if not any(said):  # a verdict with no remedy row asks for nothing
        out += "\n\nWhat to do: nothing."
    return [out]


def _cause_parts(code: str, texts: dict[str, str], in_force: Thresholds) -> list[str]:
    """The cause `code`: what it means, and what to do under each verdict it can come with."""
    from stabilitycli.classify.remedies import REMEDY_TABLE

    if code not in texts:
        return []
    out = f"cause {code}: {texts[code]}"
    for verdict, cause in REMEDY_TABLE:
        if cause == code:
            out += f"\n\nUnder the verdict {verdict}, what to do:\n" + _remedy_bullets(
                verdict, cause, in_force
            )
    return [out]


def _remedy_bullets(verdict: str, cause: str | None, in_force: Thresholds) -> str:
    """The table's remedies as bullets, each with when a run is given it."""
    from stabilitycli.classify.remedies import fill_remedy, remedy_rows

    lines = []
    for remedy in remedy_rows(verdict, cause):
        condition = remedy.condition()
        lines.append(
            f"  - {fill_remedy(remedy, in_force)}" + (f" ({condition})" if condition else "")
        )
    return "\n".join(lines)


# A rule's docstring is written for its maintainers too: the pointers into the source and
# to the design documents are dropped for a user, and "§" is said as a word.
_SOURCE_POINTER = re.compile(r"\s*\(see\s+`_[A-Za-z]\w*`\)")
_DESIGN_DOC_POINTER = re.compile(r"\s*\(seed \d+(?::[^)]*)?\)")
_SECTION_SIGN = re.compile(r"§\s*(\d)")


def reflow(text: str, width: int = 88) -> str:
    """Each paragraph filled to `width`: a filled-in threshold leaves its source line
    longer or shorter than the others. A paragraph with list items keeps its lines."""
    paragraphs = text.split("\n\n")
    return "\n\n".join(
        p if re.search(r"^\s*[-*] ", p, re.M) else textwrap.fill(" ".join(p.split()), width)
        for p in paragraphs
    )


def plain_words(text: str) -> str:
    """A docstring as a user reads it: no source or design-document pointers, no '§'."""
    text = _DESIGN_DOC_POINTER.sub("", _SOURCE_POINTER.sub("", text))
    return _SECTION_SIGN.sub(r"section \1", text)
