"""Write docs/rules.md, the rules and the decision tree, from the code that runs them.

    .venv/bin/python scripts/gen_rules_doc.py            # rewrite docs/rules.md
    .venv/bin/python scripts/gen_rules_doc.py --check    # exit 1 if it is stale

The sources are the ones `stab explain` reads: the rule registry (code, section,
summary, finding codes, thresholds read, docstring), the `Thresholds` fields and
the strings under them, and the tree's questions, verdicts, causes and remedies.
The texts are filled in by the same templates the outputs use, with the default thresholds.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout, without an install

from stabilitycli.classify.questions import (  # noqa: E402
    VERDICT_ORDER,
    cause_texts,
    fill,
    finding_texts,
    question_next,
    questions,
    verdicts,
)
from stabilitycli.classify.remedies import (  # noqa: E402
    GENERIC_EVENT,
    REMEDY_ONLY_CAUSES,
    Remedy,
    fill_remedy,
    remedy_causes,
    remedy_rows,
)
from stabilitycli.commands.explain import plain_words  # noqa: E402
from stabilitycli.core.config import Thresholds  # noqa: E402
from stabilitycli.core.model import Finding, FindingKind  # noqa: E402
from stabilitycli.detect.registry import Rule, load_rules  # noqa: E402

DOC = ROOT / "docs" / "rules.md"
RULE_FIXTURES = ROOT / "fixtures" / "rules"
REGENERATE = ".venv/bin/python scripts/gen_rules_doc.py"

# A private Python name (`_accumulated_excess`): a reader of the doc
# cannot look it up, so it must not reach the doc.
PRIVATE_NAME = re.compile(r"(?<![\w/.])_[A-Za-z]\w*")
CODE_SPAN = re.compile(r"(`[^`]*`)")
HTML_START = re.compile(r"<(?=[A-Za-z/!?])")  # '<=' is text; '<layer' would open a tag


class PrivateNameError(ValueError):
    """A text meant for the doc names a private Python name."""


def plain(text: str, where: str) -> str:
    """The text, refused when it names a private Python name."""
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


def docstring_markdown(rule: Rule, t: Thresholds) -> list[str]:
    """The rule's docstring as Markdown paragraphs, with these thresholds filled in: wrapped
    lines joined, headings in bold."""
    lines: list[str] = []
    # as `stab explain` says it: no pointers into the source or the design documents
    doc = plain(plain_words(rule.doc_for(t)), f"rule {rule.code!r} docstring")
    for paragraph in doc.split("\n\n"):
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


def remedy_lines(rows: tuple[Remedy, ...], t: Thresholds) -> list[str]:
    """One bullet per remedy, with the condition under which a run is given it."""
    lines = []
    for remedy in rows:
        condition = remedy.condition()
        note = f" *({escape(condition)})*" if condition else ""
        lines.append(f"- {escape(plain(fill_remedy(remedy, t), 'a remedy'))}{note}")
    return lines or ["- none"]


@functools.cache
def example(code: str) -> tuple[str, Finding]:
    """The finding of `code` that its `fires` fixture produces (the one at the step the fixture
    names), and the command that shows it."""
    from stabilitycli import analyze

    folder = RULE_FIXTURES / code / "fires"
    want = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    settings = {str(k): str(v) for k, v in want.get("set", {}).items()}
    thresholds = Thresholds().with_overrides(settings, "the fixture")
    path = folder / want["input"]
    found = [f for f in analyze(path, thresholds).findings if f.code == code]
    if not found:
        raise ValueError(f"{code}: its fires fixture does not fire")
    at = [f for f in found if f.step == want.get("step")]
    sets = [f"--set {k}={v}" for k, v in settings.items()]
    command = " ".join(["stab analyze", str(path.relative_to(ROOT)), *sets])
    return command, (at or found)[0]


def example_lines(kind: FindingKind) -> list[str]:
    """The kind's Example: its `fires` fixture's finding as `stab analyze --format json` writes
    it (without the `quantities` view, which repeats the evidence)."""
    command, finding = example(kind.code)
    shown = {k: v for k, v in finding.to_dict().items() if k != "quantities"}
    return [
        f"**Example** (`{command}`):",
        "",
        "```json",
        json.dumps(shown, indent=2, ensure_ascii=False),
        "```",
    ]


def kind_lines(kind: FindingKind, t: Thresholds) -> list[str]:
    """One finding kind's doc: What, Why, and an Example rendered from its `fires` fixture."""
    what = escape(plain(fill(kind.meaning, t), f"finding {kind.code!r}"))
    why = escape(plain(fill(kind.why, t), f"finding {kind.code!r}"))
    severity = f"Default severity: {kind.severity}."
    asks = f" Tree question: {kind.question}." if kind.question else ""
    return [
        f'<a id="finding-{kind.code}"></a>',
        "",
        f"#### Finding `{kind.code}`",
        "",
        severity + asks,
        "",
        f"**What:** {what}",
        "",
        f"**Why:** {why}",
        "",
        *example_lines(kind),
        "",
    ]


def render(defaults: Thresholds | None = None) -> str:
    """The text of docs/rules.md."""
    t = defaults or Thresholds()
    rules = load_rules()
    question_texts, answers = questions(t), question_next(t)
    verdict_texts, cause_text, finding_text = verdicts(t), cause_texts(t), finding_texts(t)
    event_words = " and ".join(f'"{w}"' for w in GENERIC_EVENT.values())

    out = [
        "# Rules and the decision tree",
        "",
        f"Generated from the code by `scripts/gen_rules_doc.py`; do not edit it by hand, run "
        f"`{REGENERATE}` (the tests fail while it is stale). The sources: the rule registry "
        "(`stabilitycli/detect/registry.py` and the rule modules' docstrings), the finding kinds "
        "(`stabilitycli/detect/kinds/`, each with an Example from its `fires` fixture under "
        "`fixtures/rules/`), the thresholds "
        "(`stabilitycli/core/config.py`), the tree's texts (`stabilitycli/classify/questions.py`) "
        "and its remedies (`stabilitycli/classify/remedies.py`).",
        "",
        "Every threshold stated is at its default. A `[tool.stab]` table in a `pyproject.toml`, "
        "a `stab.toml` or `--set NAME=VALUE` changes the thresholds; `stab explain CODE` prints "
        "one entry with the thresholds in force.",
        "",
        "- [Rules](#rules)",
        "- [The decision tree](#the-decision-tree): [questions](#questions), "
        "[verdicts and their remedies](#verdicts), [causes](#causes)",
        "- [Thresholds](#thresholds)",
        "",
        "## Rules",
        "",
        "The rules run in this order (a rule runs after those whose results it uses), each "
        "with the section of the stability tree it belongs to.",
        "",
        "| rule | section | what it finds | finding codes |",
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
            f"### `{rule.code}` (section {rule.section})",
            "",
            escape(plain(rule.summary_for(t), f"rule {rule.code!r} summary")),
            "",
            "| finding code | what it means | what to do |",
            "|---|---|---|",
        ]
        for code in rule.emits:
            meaning, todo = finding_text.get(code, ("(no text)", "(no text)"))
            meaning = escape(plain(meaning, f"finding {code!r}"), in_table=True)
            todo = escape(plain(todo, f"finding {code!r}"), in_table=True)
            out.append(f"| `{code}` | {meaning} | {todo} |")
        out.append("")
        if rule.reads:
            out += ["Thresholds it reads:", "", *threshold_rows(rule.reads, t), ""]
        else:
            out += ["Thresholds it reads: none.", ""]
        out += docstring_markdown(rule, t)
        for kind in rule.kinds:
            out += kind_lines(kind, t)
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
        "| id | question | what the answers lead to |",
        "|---|---|---|",
    ]
    for qid, text in question_texts.items():
        question = escape(plain(text, f"question {qid}"), in_table=True)
        leads_to = escape(plain(answers.get(qid, "(no text)"), f"question {qid}"), in_table=True)
        out.append(f"| {qid} | {question} | {leads_to} |")
    out += [
        "",
        "### Verdicts",
        "",
        "Each verdict with its remedies: the row for the verdict's cause, or the verdict's own "
        "row when its cause has none. A remedy with a condition is given only to a run whose log "
        f"shows what it says; {event_words} stand for the run's own step and rank.",
    ]
    for code in [*in_order, *others]:
        section, severity, text = verdict_texts[code]
        where = section or "none (the whole run)"
        out += [
            "",
            f'<a id="verdict-{code}"></a>',
            "",
            f"#### `{code}`",
            "",
            f"Severity: {severity}. Section: {where}.",
            "",
            escape(plain(text, f"verdict {code!r}")),
        ]
        # causes that share a row are said together, the verdict's own row last
        causes = remedy_causes(code)
        shared: dict[tuple[Remedy, ...], list[str | None]] = {}
        for cause in [*filter(None, causes), *(c for c in causes if c is None)]:
            shared.setdefault(remedy_rows(code, cause), []).append(cause)
        for rows, named in shared.items():
            links = " or ".join(f"[`{c}`](#cause-{c})" for c in named if c is not None)
            if len(shared) == 1 and None in named:
                heading = "Remedies:"
            elif None in named:  # the verdict's own row: it covers the causes named with it
                heading = "Remedies for any other cause, or none:"
            else:
                heading = f"Remedies when the cause is {links}:"
            out += ["", heading, "", *remedy_lines(rows, t)]
        if not causes:
            out += ["", "Remedies: none."]

    table_causes = {c for v in verdict_texts for c in remedy_causes(v) if c is not None}
    out += ["", "### Causes", "", "What the tree can name as a verdict's cause (`verdict.cause`)."]
    remedy_only = sorted((table_causes | set(cause_text)) & REMEDY_ONLY_CAUSES)
    named = [c for c in cause_text if c not in REMEDY_ONLY_CAUSES]
    named += sorted(table_causes - set(cause_text) - REMEDY_ONLY_CAUSES)
    for cause in [*named, *remedy_only]:
        under = [v for v in verdict_texts if cause in remedy_causes(v)]
        if cause == (remedy_only or [None])[0]:
            out += [
                "",
                "Readings that choose a verdict's remedies but are never written into "
                "`verdict.cause`:",
            ]
        out += [
            "",
            f'<a id="cause-{cause}"></a>',
            "",
            f"#### `{cause}`",
            "",
            escape(plain(cause_text.get(cause, "(no text)"), f"cause {cause!r}")),
            "",
            (
                f"Remedies: under the verdict{'s' if len(under) > 1 else ''} "
                + ", ".join(f"[`{v}`](#verdict-{v})" for v in under)
                if under
                else "Remedies: none of its own (the verdict's own row applies)"
            )
            + ".",
        ]

    read_by: dict[str, list[str]] = {}
    for rule in rules.values():
        for name in rule.reads:
            read_by.setdefault(name, []).append(rule.code)
    out += [
        "",
        "## Thresholds",
        "",
        "Every threshold, in the order `stab explain thresholds` lists them, with the rules "
        "that read it (none: it is read outside the rules, by the classifier, the remedies or "
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
    except PrivateNameError as err:
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
