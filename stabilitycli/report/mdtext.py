"""Safe text for Markdown documents (post-mortem, PR comments).

Run names, metric keys and messages come from logs that anyone may have
written; rendered on GitHub or in an IDE they must stay text. Only what could
start markup is neutralised - a `<` that could open a tag, an `&` that could
start an entity, `*` and backticks, a `](` that could close a link - so that
the raw file stays readable ("->", ">= 30x", "[897, 950]" stay as they are).
"""

from __future__ import annotations

import re

_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?\w+;)")


def text(value: object) -> str:
    """Text from a log, safe in Markdown prose: no raw HTML, no accidental emphasis or links."""
    out = str(value).replace("\\", "\\\\")
    out = _ENTITY.sub("&amp;", out)
    out = _TAG_OPEN.sub("&lt;", out)
    out = out.replace("`", "\\`").replace("*", "\\*").replace("](", "\\](")
    return out


def cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return text(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def code(value: object) -> str:
    """Inline code; backticks inside are fenced with a longer run (CommonMark)."""
    body = str(value).replace("\n", " ")
    fence = "``" if "`" in body else "`"
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"
