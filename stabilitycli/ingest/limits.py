"""Bounds on what one input may cost: bytes, nesting, files walked, time against a server.

`stab` reads archives nobody curated and runs unattended in CI, so no input may
take unbounded memory or time: a gzip bomb, a 100 MB TensorBoard record, a
folder with a symlink to itself, a tracking server that pages forever. Each
bound is one field here, with a default generous enough for any real training
log; hitting one is a clear input error naming the setting and how to raise it
(`STAB_LIMIT_<FIELD>=VALUE` in the environment), never an out-of-memory kill or
a hang. docs/limits.md lists them; a test keeps that page and this class in step.
"""

from __future__ import annotations

import os
from dataclasses import fields

from stabilitycli.core.errors import StabInputError
from stabilitycli.core.records import dataclass

ENV_PREFIX = "STAB_LIMIT_"
MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True)
class InputLimits:
    # Bytes one input may hold in memory once decompressed. A 10-million-line JSONL
    # log is about 1 GiB; a bigger one is better read after splitting or raising this.
    max_input_bytes: int = 2 * GiB
    # A compressed log may inflate to this multiple of its size on disk (real JSONL
    # compresses 5-20x; a bomb 1,000x and more), and never past max_input_bytes.
    max_decompression_ratio: int = 100
    # One text line (JSONL, CSV row, stdout line): real ones are under a few KiB.
    max_line_bytes: int = 16 * MiB
    # One TensorBoard or W&B record: scalar events are tens of bytes; an image
    # summary can be MiBs, and a bigger record is skipped unread (it holds no scalar).
    max_record_bytes: int = 64 * MiB
    # Nesting of JSON objects and lists: W&B and HF logs nest 3-5 deep.
    max_json_depth: int = 64
    # A folder walk (`--recursive`, a run folder's parts): files looked at and depth.
    max_walk_files: int = 200_000
    max_walk_depth: int = 64
    # Against a tracking server: all requests together, one request, and pages.
    server_total_seconds: float = 600.0
    server_request_seconds: float = 30.0
    server_max_pages: int = 10_000

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> InputLimits:
        """The defaults, with any `STAB_LIMIT_<FIELD>` set in the environment."""
        environ = dict(os.environ) if environ is None else environ
        _refuse_unknown(environ)
        values: dict[str, int | float] = {}
        for spec in fields(cls):
            raw = environ.get(ENV_PREFIX + spec.name.upper())
            if raw is None:
                continue
            kind = float if spec.type in ("float", float) else int
            try:
                value = kind(raw.replace("_", ""))
            except ValueError:
                raise StabInputError(
                    ENV_PREFIX + spec.name.upper(), f"expects a {kind.__name__}, got {raw!r}"
                ) from None
            if value <= 0:
                raise StabInputError(ENV_PREFIX + spec.name.upper(), f"must be > 0, got {raw!r}")
            values[spec.name] = value
        return cls(**values)  # type: ignore[arg-type]


def _refuse_unknown(environ: dict[str, str]) -> None:
    """A misspelt `STAB_LIMIT_*` would leave the limit the user meant to change as it was,
    silently: refused, with the names there are."""
    known = [ENV_PREFIX + spec.name.upper() for spec in fields(InputLimits)]
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known:
            import difflib

            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise StabInputError(name, f"no such limit ({hint}the limits are {', '.join(known)})")


def limit_hit(path: str, what: str, setting: str, value: int | float, **where) -> StabInputError:
    """The error for a bound reached: what happened, the setting, and how to raise it.

    `where` passes `line=` or `record=` through to the error when the bound is one
    record's (a line too long), so the message names it.
    """
    shown = _bytes(value) if setting.endswith("_bytes") else f"{value:g}"
    return StabInputError(
        path,
        f"{what}: over the limit {setting} = {shown} (raise it with "
        f"{ENV_PREFIX}{setting.upper()}=...)",
        **where,
    )


def _bytes(count: int | float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if count >= size:
            return f"{count / size:g} {unit}"
    return f"{count:g} bytes"


def limits_in_force() -> InputLimits:
    """The limits for code that has no `ReadOptions` at hand (sniffing, folder walks).

    Read from the environment each time (it is a dozen lookups), so a test or a
    long-lived caller that changes `STAB_LIMIT_*` gets what it set.
    """
    return InputLimits.from_env()
