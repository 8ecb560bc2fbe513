"""What a reader module provides: the contract `ingest.read` relies on.

A reader is a module, not a class: `ingest/__init__.py` imports it by name from
`READERS` only when a path needs it, so `stab --help` never pays for polars.
These protocols give those modules a type, so mypy checks the calls made on
them and a new reader has one place that says what it must define.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from stabilitycli.frame import RunData
    from stabilitycli.ingest.options import ReadOptions


@runtime_checkable
class Reader(Protocol):
    """A reader module: `NAME`, `sniff` and `read` at module level."""

    NAME: str

    def sniff(self, path: Path, head: bytes, /) -> bool:
        """True when this reader takes `path`.

        `head` is the first 8 KiB of a file (empty for a directory); a sniff
        must be cheap and must not raise on input it does not recognise.
        """
        ...

    def read(self, path: Path, options: ReadOptions, /) -> RunData:
        """The run, ending in `frame.finalize`; `StabInputError` when it cannot be used at all."""
        ...


@runtime_checkable
class UriReader(Reader, Protocol):
    """A reader that also takes URIs (`sqlite:///...`, `http://...`, `file://...`)."""

    def sniff_uri(self, text: str, /) -> bool:
        """True when this reader takes the URI `text` (no network access: the scheme decides)."""
        ...

    def read(self, path: Path | str, options: ReadOptions, /) -> RunData:
        """As `Reader.read`; a URI arrives as the string the user gave."""
        ...
