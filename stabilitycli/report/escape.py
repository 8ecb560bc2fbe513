"""Text from the input, made safe for the medium it is written to: one function per medium.

Keys, run names, paths, experiment names, params and tags come from logs that
anyone may have written, and stab's own messages quote them. Every renderer
passes such text through this module, so that input can only ever be text:

- it never starts a line: a newline in a key would otherwise begin a line with
  `::error::...`, which GitHub Actions runs as a workflow command whatever the
  output format (it reads every line of a step's output, after leading blanks);
- it never reaches a terminal as a control sequence (ANSI colours, OSC 8 links,
  a title change) or as a bidi override that shows the text in another order;
- it never becomes markup: rich markup in the terminal, links, images and HTML
  in Markdown, elements in XML.

Control characters are shown, not dropped, so that two keys that differ only in
one stay distinguishable: `\\n`, `\\t`, `\\x1b`, `\\u202e`.

rich is imported inside the functions that need it: `stab --help` imports the
commands, which may import this module.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.measure import Measurement

# C0, DEL and C1; the bidi embeddings, overrides and isolates, the marks and zero-width
# characters that reorder or hide text; the Unicode line and paragraph separators, which
# some terminals and editors break lines on; lone surrogates (a JSON "\ud800" that stdout
# cannot encode); and the two noncharacters XML 1.0 forbids
_OTHER_CONTROLS = (
    "\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff\ufffe\uffff"
)
_CONTROLS = f"[\x00-\x1f{_OTHER_CONTROLS}]"
# GitHub's own escaping carries newlines (%0A, %0D); every other control is shown
_CONTROLS_BUT_NEWLINES = f"[\x00-\x09\x0b\x0c\x0e-\x1f{_OTHER_CONTROLS}]"


@functools.cache
def _control() -> re.Pattern[str]:
    # compiled at the first text that holds one (`visible`): most runs' text holds none
    return re.compile(_CONTROLS)


@functools.cache
def _control_but_newlines() -> re.Pattern[str]:
    # compiled when GitHub's output first asks: a class of these ranges takes re some
    # 0.4 ms to compile, which every other command paid at start-up (#40)
    return re.compile(_CONTROLS_BUT_NEWLINES)


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _show(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: object) -> str:
    """Every control, bidi and separator character written as its escape: one plain line."""
    text = str(text)
    # every character of `_CONTROLS` is one Python does not print (tests/report/test_escape.py
    # checks each code point), so a printable string holds none: as it is, without the
    # pattern, which took re ~0.7 ms to compile at every start-up (#40)
    if text.isprintable():
        return text
    return _control().sub(_show, text)


# ---------------------------------------------------------------- terminal


def terminal(text: object) -> str:
    """For a rich `Text`, which is never parsed as markup: controls shown.

    Renderers put input only into `Text` objects, never into strings that rich parses
    (a table cell or panel title given as a string is markup: `[/]` in it raises)."""
    return visible(text)


def _leads_command(line: str) -> bool:
    return line.lstrip().startswith("::")


class CommandGuard:
    """A renderable that draws another and keeps any drawn line from starting with `::`.

    Escaping each string keeps input newlines out, but rich still wraps and folds
    long text at the console width, and a wrapped line may begin with input text
    that holds `::`. Such a line gets a backslash before its first colon (the
    same visible-escape convention as `\\n`)."""

    def __init__(self, renderable: RenderableType) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment

        from stabilitycli.report.console import PLAIN

        if PLAIN.get():
            # in a pipe a table of paths runs past the width by its content: never cut
            lines = Segment.split_lines(console.render(self.renderable, options))
        else:
            lines = iter(console.render_lines(self.renderable, options, pad=False))
        for line in lines:
            if _leads_command("".join(s.text for s in line if not s.control)):
                line = _escape_first_colon(line)
            yield from line
            yield Segment.line()

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        from rich.measure import Measurement

        return Measurement.get(console, options, self.renderable)


def _escape_first_colon(line: list[Any]) -> list[Any]:
    from rich.segment import Segment

    out = list(line)
    for i, seg in enumerate(out):
        if seg.control or not seg.text.strip():
            continue
        at = seg.text.index(":")
        out[i] = Segment(seg.text[:at] + "\\" + seg.text[at:], seg.style, seg.control)
        break
    return out


# ---------------------------------------------------------------- Markdown

# only what could start markup is escaped, so that the raw file stays readable
# ("->", ">= 30x", "[897, 950]" stay as they are): a `<` that could open a tag or
# an autolink, an `&` that could start an entity, emphasis and code, and the `](`
# or `][` that would close a link or an image; a lone `>` or `[` starts nothing
# mid-line, and input never starts a line
_TAG_OPEN = r"<(?=[A-Za-z/!?])"
_ENTITY = r"&(?=#?\w+;)"


@functools.cache
def _markdown_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # compiled when Markdown is first written: a terminal run paid for both at start-up (#40)
    return re.compile(_ENTITY), re.compile(_TAG_OPEN)


def markdown(text: object) -> str:
    """Text from a log, safe in Markdown prose: one line, no raw HTML, links, emphasis, code."""
    out = visible(text).replace("\\", "\\\\")
    entity, tag_open = _markdown_patterns()
    out = entity.sub("&amp;", out)
    out = tag_open.sub("&lt;", out)
    out = out.replace("`", "\\`").replace("*", "\\*").replace("](", "\\](").replace("][", "\\][")
    # a colon first in the text is escaped (`\\:` renders as `:`) so that no line of the
    # document can start with `::` even where the text begins a line
    return "\\" + out if out.startswith(":") else out


def markdown_cell(text: object) -> str:
    """Text safe inside a Markdown table cell (a `|` would end the cell)."""
    return markdown(text).replace("|", "\\|")


def markdown_code(text: object) -> str:
    """Inline code: backslashes and markup are literal there, only the fence must not close.

    The fence is one backtick longer than the longest run inside (CommonMark)."""
    body = visible(text)
    runs = re.findall("`+", body)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def markdown_document(text: str) -> str:
    """A whole Markdown document whose lines were built by stab: no line leads with `::`.

    Escaped input cannot start a line; this holds the promise for anything else
    (a code block quoting input), with the CommonMark escape `\\:`, shown as `:`."""
    return _guard_lines(text, "\\:")


# ---------------------------------------------------------------- XML (JUnit)


def xml(text: object) -> str:
    """Text or an attribute value for ElementTree, which escapes `<`, `&` and quotes itself;
    characters XML 1.0 cannot hold, and every other control, are shown as escapes."""
    return visible(text)


def xml_document(text: str) -> str:
    """A serialised XML document: a line leading with `::` gets its first colon as `&#58;`,
    which every XML parser reads back as `:` (in text and in attribute values alike)."""
    return _guard_lines(text, "&#58;")


# ---------------------------------------------------------------- plain text


def plain(text: object) -> str:
    """One line of plain text (`--format concise`): controls shown."""
    return visible(text)


def plain_path(path: object) -> str:
    """A path first on a plain-text line: one that starts with `:` is written as `./:...`,
    the same file, so the line cannot lead with `::`."""
    shown = visible(path)
    return "./" + shown if shown.lstrip().startswith(":") else shown


# ---------------------------------------------------------------- GitHub workflow commands


def github_data(text: object) -> str:
    """The message of a workflow command: the runner unescapes %25, %0D and %0A, so a
    newline in it is a newline in the annotation, never a new command. Other controls
    are shown."""
    out = _control_but_newlines().sub(_show, str(text))
    return out.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(text: object) -> str:
    """A property value (file=, title=): `:` and `,` would end it, so they are escaped too."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")


# ---------------------------------------------------------------- HTML


def html(text: object) -> str:
    """Text or an attribute value in HTML: controls shown, then HTML-escaped."""
    import html as _html

    return _html.escape(visible(text), quote=True)


def _guard_lines(text: str, colon: str) -> str:
    if "::" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if _leads_command(line):
            at = line.index(":")
            lines[i] = line[:at] + colon + line[at + 1 :]
    return "\n".join(lines)
