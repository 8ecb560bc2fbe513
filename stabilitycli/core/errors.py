"""The one error type that reaches the user: a bad input, said in one line."""

from __future__ import annotations

import errno


class StabInputError(Exception):
    """Input that cannot be used at all. The CLI prints `str(err)` and exits 2."""

    def __init__(self, path: str, reason: str, line: int | None = None, record: int | None = None):
        self.path = str(path)
        self.reason = reason
        self.line = line
        self.record = record
        where = self.path
        if line is not None:
            where += f":{line}"
        elif record is not None:
            where += f" (record {record})"
        super().__init__(f"{where}: {reason}")


class StabUsageError(Exception):
    """A bad option or config value (exit 2)."""


def internal_error_message(err: BaseException, where: str) -> str:
    """The one line for a bug in stab itself (not in the input), naming the run it hit.

    Every command and the batch workers say it the same way, so a user who
    reports one can be asked for the same thing: the run, the type, the text. Running out
    of memory is neither a bug nor the input's fault, and is said as what it is.
    """
    if isinstance(err, MemoryError):
        return (
            f"{where}: out of memory ({one_line(err) or 'an allocation failed'}): the run "
            "needs more memory than this process may take (see docs/limits.md, Memory)"
        )
    return (
        f"{where}: internal error {type(err).__name__}: {one_line(err)}; "
        "this is a bug in stab, not a fault in the input"
    )


# What the decoders stab reads with raise on bytes they cannot decode (by name, so that
# this module imports neither polars nor pyarrow): a fault of the input whatever reader
# met it. Anything else a reader raises (a KeyError, a TypeError, polars' ColumnNotFound)
# is a bug in that reader and is reported as one, never as the input's fault.
_DECODER_ERRORS = frozenset(
    {
        "PanicException",  # polars' Rust decoders on damaged Parquet / Arrow / CSV
        "ComputeError",  # polars on a table it cannot parse
        "ArrowInvalid",  # pyarrow on a damaged file
        "UnicodeDecodeError",
        "JSONDecodeError",
        "EOFError",  # a compressed stream cut short
        "error",  # zlib.error
        "ZstdError",
        "BadGzipFile",
        "DatabaseError",  # sqlite3 on a damaged database
        "YAMLError",
        "ScannerError",
        "ParserError",
        "TOMLDecodeError",
    }
)


def from_the_input(err: BaseException) -> bool:
    """Whether `err`, raised while reading, says the input is damaged (an input error)
    rather than that stab has a bug (an internal error)."""
    if isinstance(err, (StabInputError, StabUsageError, OSError, RecursionError, MemoryError)):
        return True
    return any(kind.__name__ in _DECODER_ERRORS for kind in type(err).__mro__[:-2])


# The interpreter's own ways of stopping (Ctrl-C, sys.exit, a generator closed): never an
# error to report, so every boundary that catches BaseException lets these through.
NOT_ERRORS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, GeneratorExit)

# errno values whose own wording is the whole story; anything else keeps strerror's text
_OS_REASONS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "not a directory",
    errno.ENOENT: "no such file or directory",
    errno.ELOOP: "too many levels of symbolic links",
}
_DETAIL_CHARS = 300  # an error text longer than this is cut: it is one line of stderr


def input_error_from(path: str, err: BaseException, what: str) -> StabInputError:
    """The input error for anything a reader raised while reading `path` as `what`.

    A reader that fails on its input is reporting the input, whatever it raised:
    a decoder's ValueError, a native library's panic (polars' PanicException
    derives from BaseException), a RecursionError on deep nesting, or an OSError
    from the file system. The original stays as `__cause__` for `--debug`.
    """
    if isinstance(err, StabInputError):
        return err
    if isinstance(err, OSError):
        reason = os_reason(err)
        name = getattr(err, "filename", None)
        if name is not None and str(name) != str(path):
            reason = f"{name}: {reason}"
    elif isinstance(err, RecursionError):
        reason = f"cannot parse {what}: nested too deeply to follow"
    elif isinstance(err, MemoryError):
        reason = f"cannot read {what}: out of memory (see docs/limits.md)"
    elif type(err).__name__ == "PanicException":
        reason = f"cannot parse {what}: the decoder failed on damaged data ({one_line(err)})"
    else:
        reason = f"cannot parse {what}: {type(err).__name__}: {one_line(err)}"
    out = StabInputError(path, reason)
    out.__cause__ = err
    return out


def os_reason(err: OSError) -> str:
    """`permission denied`, `is a directory`...: what the OS said, without errno numbers."""
    if err.errno in _OS_REASONS:
        return _OS_REASONS[err.errno]
    return (err.strerror or one_line(err) or type(err).__name__).lower()


def one_line(err: BaseException) -> str:
    """The error's text on one line, cut to a readable length, control characters shown."""
    text = " ".join(str(err).split())
    if len(text) > _DETAIL_CHARS:
        text = text[:_DETAIL_CHARS] + "..."
    return visible(text)


def visible(text: str) -> str:
    """`text` with control characters as escapes, so an error is one line and moves no cursor."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
