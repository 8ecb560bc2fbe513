"""Write docs/rules.md, the rules and the decision tree, from the code that runs them.

    .venv/bin/python scripts/gen_rules_doc.py            # rewrite docs/rules.md
    .venv/bin/python scripts/gen_rules_doc.py --check    # exit 1 if it is stale

The sources are the ones `stab explain` reads: the rule registry (code, section,
summary, finding codes, thresholds read, docstring), the `Thresholds` fields and
the strings under them, and the tree's questions, verdicts, causes and remedies.
Every number is a default threshold, filled in by the same templates the outputs use.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout, without an install

from stabilitycli.classify.questions import (  # noqa: E402
    REMEDY_NEEDS,
    VERDICT_ORDER,
    cause_texts,
    questions,
    remedies,
    verdicts,
)
from stabilitycli.config import Thresholds  # noqa: E402
from stabilitycli.detect.registry import Rule, load_rules  # noqa: E402

DOC = ROOT / "docs" / "rules.md"
REGENERATE = ".venv/bin/python scripts/gen_rules_doc.py"

# What a remedy in REMEDY_NEEDS waits for, in words. A need missing here stops the
# generator, so a new one cannot reach the doc as an unexplained code.
NEED_WORDS = {
    "fp16": "only for a run known to be fp16",
    "no-moving-scale": "only when no loss-scale change is seen in the log",
}

# A private Python name (`_accumulated_excess`): a reader of the doc
# cannot look it up, so it must not reach the doc.
PRIVATE_NAME = re.compile(r"(?<![\w/.])_[A-Za-z]\w*")
# "(see `_helper`)": a pointer into the source, dropped; any other private name is an error.
SOURCE_POINTER = re.compile(r"\s*\(see\s+`_[A-Za-z]\w*`\)")
CODE_SPAN = re.compile(r"(`[^`]*`)")
HTML_START = re.compile(r"<(?=[A-Za-z/!?])")  # '<=' is text; '<layer' would open a tag


class PrivateNameError(ValueError):
    """A text meant for the doc names a private Python name."""


def plain(text: str, where: str) -> str:
    """The text with source pointers dropped; a private name left elsewhere is refused."""
    text = SOURCE_POINTER.sub("", text)
    found = PRIVATE_NAME.findall(text)
    if found:
        raise PrivateNameError(f"{where}: names private Python name(s) {sorted(set(found))}")
    return text


def escape(text: str, in_table: bool = False) -> str:
    """Markdown-safe prose: `*`, `\\` and a tag-like `<` are literal outside code spans."""
    parts = CODE_SPAN.split(text)
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = HTML_START.sub("&lt;", parts[i].replace("\\", "\\\\").replace("*", "\\*"))
    out = "".join(parts)
    return out.replace("|", "\\|") if in_table else out


def docstring_markdown(rule: Rule) -> list[str]:
    """The rule's docstring as Markdown paragraphs: wrapped lines joined, headings in bold."""
    lines: list[str] = []
    for paragraph in plain(rule.doc, f"rule {rule.code!r} docstring").split("\n\n"):
        rows = [row.strip() for row in paragraph.splitlines() if row.strip()]
        if not rows:
            continue
        if any(row.startswith(("- ", "* ")) for row in rows):
            # a list keeps its lines and its markers
            text = "\n".join(
                row[:2] + escape(row[2:]) if row.startswith(("- ", "* ")) else escape(row)
                for row in rows
            )
        else:
            text = escape(" ".join(rows))
        for heading in ("What it detects:", "Why it matters:"):
            if text.startswith(heading):
                text = f"**{heading}**{text[len(heading) :]}"
        lines += [text, ""]
    return lines


def threshold_rows(names: tuple[str, ...], defaults: Thresholds) -> list[str]:
    """A table of thresholds in the order `Thresholds` declares them, so a '...' line follows
    the one it continues; one whose predecessor is not in the table says which it continues."""
    order = [f.name for f in fields(Thresholds)]
    chosen = sorted(set(names), key=order.index)
    rows = ["| threshold | default | meaning |", "|---|---|---|"]
    for i, name in enumerate(chosen):
        meaning = plain(Thresholds.describe(name), f"threshold {name}") or "(no description)"
        previous = order[order.index(name) - 1] if order.index(name) else None
        if meaning.startswith("...") and (i == 0 or chosen[i - 1] != previous):
            meaning = f"(continues `{previous}`) {meaning}"
        rows.append(
            f"| `{name}` | {getattr(defaults, name)!r} | {escape(meaning, in_table=True)} |"
        )
    return rows


def remedy_lines(items: list[str]) -> list[str]:
    lines = []
    for remedy in items:
        need = REMEDY_NEEDS.get(remedy)
        if need is not None and need not in NEED_WORDS:
            raise ValueError(f"remedy need {need!r} has no words in NEED_WORDS; add them")
        note = f" *({NEED_WORDS[need]})*" if need else ""
        lines.append(f"- {escape(plain(remedy, 'a remedy'))}{note}")
    return lines or ["- (none of its own)"]


def render(defaults: Thresholds | None = None) -> str:
    """The text of docs/rules.md."""
    t = defaults or Thresholds()
    rules = load_rules()
    question_texts, verdict_texts = questions(t), verdicts(t)
    remedy_texts, cause_text = remedies(t), cause_texts(t)

    out = [
        "# Rules and the decision tree",
        "",
        f"Generated from the code by `scripts/gen_rules_doc.py`; do not edit it by hand, run "
        f"`{REGENERATE}` (the tests fail while it is stale). The sources: the rule registry "
        "(`stabilitycli/detect/registry.py` and the rule modules' docstrings), the thresholds "
        "(`stabilitycli/config.py`) and the tree's texts (`stabilitycli/classify/questions.py`).",
        "",
        "Every number is a default. A `[tool.stab]` table in a `pyproject.toml`, a `stab.toml` or "
        "`--set NAME=VALUE` changes the thresholds; `stab explain CODE` prints one entry with the "
        "thresholds in force.",
        "",
        "- [Rules](#rules)",
        "- [The decision tree](#the-decision-tree): [questions](#questions), "
        "[verdicts](#verdicts), [causes](#causes)",
        "- [Thresholds](#thresholds)",
        "",
        "## Rules",
        "",
        "The rules run in this order (a rule runs after those whose results it uses); "
        "§ is the section of the stability tree a rule belongs to.",
        "",
        "| rule | § | what it finds | finding codes |",
        "|---|---|---|---|",
    ]
    for rule in rules.values():
        codes = ", ".join(f"`{c}`" for c in rule.emits)
        summary = escape(plain(rule.summary_for(t), f"rule {rule.code!r} summary"), True)
        out.append(f"| [`{rule.code}`](#rule-{rule.code}) | {rule.section} | {summary} | {codes} |")
    for rule in rules.values():
        out += [
            "",
            f'<a id="rule-{rule.code}"></a>',
            "",
            f"### `{rule.code}` (§{rule.section})",
            "",
            escape(plain(rule.summary_for(t), f"rule {rule.code!r} summary")),
            "",
            "Finding codes: " + ", ".join(f"`{c}`" for c in rule.emits) + ".",
            "",
        ]
        if rule.reads:
            out += ["Thresholds it reads:", "", *threshold_rows(rule.reads, t), ""]
        else:
            out += ["Thresholds it reads: none.", ""]
        out += docstring_markdown(rule)
        out.pop()  # the blank line after the last paragraph

    in_order = [v for v in VERDICT_ORDER if v in verdict_texts]
    others = [v for v in verdict_texts if v not in VERDICT_ORDER]
    out += [
        "",
        "## The decision tree",
        "",
        "The tree walks its sections in the order of the questions below and records each "
        "answer with the numbers behind it; the verdict is the first of these that applies: "
        + " → ".join(f"`{v}`" for v in in_order)
        + ("; else " + " or ".join(f"`{v}`" for v in others) if others else "")
        + ".",
        "",
        "### Questions",
        "",
        "| id | question |",
        "|---|---|",
    ]
    for qid, text in question_texts.items():
        out.append(f"| {qid} | {escape(plain(text, f'question {qid}'), in_table=True)} |")
    out += [
        "",
        "### Verdicts",
        "",
        "A verdict's remedies are printed after those of its cause; a remedy marked *only ...* "
        "is left out for a run whose log does not show that.",
    ]
    for code in [*in_order, *others]:
        section, severity, text = verdict_texts[code]
        where = f"§{section}" if section else "none (the whole run)"
        out += [
            "",
            f"#### `{code}`",
            "",
            f"Severity: {severity}. Section: {where}.",
            "",
            escape(plain(text, f"verdict {code!r}")),
            "",
            "Remedies:",
            "",
            *remedy_lines(remedy_texts.get(code, [])),
        ]
    out += ["", "### Causes", "", "What the tree can name as a verdict's cause, and its remedies."]
    for cause, text in cause_text.items():
        out += [
            "",
            f"#### `{cause}`",
            "",
            escape(plain(text, f"cause {cause!r}")),
            "",
            "Remedies:",
            "",
            *remedy_lines(remedy_texts.get(cause, [])),
        ]
    loose = [k for k in remedy_texts if k not in verdict_texts and k not in cause_text]
    if loose:
        out += [
            "",
            "### Other remedy lists",
            "",
            "Remedy lists the tree uses that belong to no verdict or cause above.",
        ]
        for key in loose:
            out += ["", f"#### `{key}`", "", *remedy_lines(remedy_texts[key])]

    read_by: dict[str, list[str]] = {}
    for rule in rules.values():
        for name in rule.reads:
            read_by.setdefault(name, []).append(rule.code)
    out += [
        "",
        "## Thresholds",
        "",
        "Every threshold, in the order `stab explain thresholds` lists them, with the rules "
        "that read it (none: it is read outside the rules, by the tree, `stab ranks` or "
        "`stab compare`).",
        "",
        "| threshold | default | read by | meaning |",
        "|---|---|---|---|",
    ]
    for spec in fields(Thresholds):
        users = ", ".join(f"`{c}`" for c in read_by.get(spec.name, [])) or "none"
        meaning = plain(Thresholds.describe(spec.name), f"threshold {spec.name}")
        out.append(
            f"| `{spec.name}` | {getattr(t, spec.name)!r} | {users} "
            f"| {escape(meaning or '(no description)', in_table=True)} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--out", type=Path, default=DOC, help="the file (default docs/rules.md)")
    args = parser.parse_args(argv)
    try:
        text = render()
    except ValueError as err:  # a private name, or a remedy need with no words
        print(f"cannot write {args.out}: {err}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
        if current != text:
            state = "missing" if current is None else "stale"
            print(f"{args.out} is {state}: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
