"""What a reader module provides, and how a reader is declared to `ingest.read`.

A reader is a module, not a class: `ingest/__init__.py` imports it only when a
path could be its, so `stab --help` never pays for polars. These protocols give
those modules a type, so mypy checks the calls made on them and a new reader has
one place that says what it must define. `ReaderEntry` is what a reader's
package says about it without importing it: its name, where it lives, what it
may take and its words in `stab analyze --help`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from stabilitycli.core.records import dataclass

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


@dataclass(frozen=True)
class Takes:
    """What a reader's `sniff` can accept at all, told without importing the reader.

    Importing every reader to ask each cost more than reading a small log (0.1 s),
    so a reader is imported only when the path could be its: a folder, a file name
    (lower case) ending in one of `suffixes` or holding one of `marks`, a file
    starting with one of `magic`, or a text log. These are each sniff's own first
    tests, never more: a reader skipped here would have refused the path
    (tests/ingest/test_detect_cheap.py checks that against every fixture).
    """

    folders: bool = False
    suffixes: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()
    magic: tuple[bytes, ...] = ()
    # a text log is told by reading its head, which `ingest.detect_format` does only
    # when a reader that takes text logs has its turn
    text_log: bool = False
    any_file: bool = False

    def may_take(self, is_folder: bool, head: bytes, name: str) -> bool:
        """True when the name or first bytes alone are enough to ask the reader."""
        if is_folder:
            return self.folders
        if self.any_file or name.endswith(self.suffixes) or head.startswith(self.magic):
            return True
        return any(mark in name for mark in self.marks)


@dataclass(frozen=True)
class ReaderEntry:
    """One reader as its package declares it, in a module that imports no reader.

    `name` is what `--format-in` and `RunData.source.format` say; `module` is
    imported only when a path may be this reader's; `supported` is its phrase
    in the list of inputs `stab analyze --help` prints.
    """

    name: str
    module: str
    takes: Takes
    supported: str
