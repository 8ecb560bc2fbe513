"""The options that say how to read a log, declared once for every command that reads one.

A command asks for them with one parameter, `read: ReadArgs`, and the decorator
`takes_read_options` puts the options themselves in its place in the signature typer
reads; the command receives their values gathered in one `ReadArgs`. So a new way of
reading (a store, a key) is one field and one declaration here, and every command
offers it.

Nothing heavy at import: `ReadArgs.options` imports the reader's option type when called.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from stabilitycli.core.errors import StabUsageError
from stabilitycli.core.records import dataclass

if TYPE_CHECKING:
    from stabilitycli.ingest.options import ReadOptions


def pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    """NAME=VALUE items (`--set`, `--metric` of analyze): both sides required."""
    out: dict[str, str] = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise StabUsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class ReadArgs:
    """The read options as given on the command line (unparsed: `metric` is NAME=LOGKEY)."""

    metric: list[str] | None = None
    step_key: str | None = None
    rank_key: str | None = None
    format_in: str | None = None
    pattern: str | None = None
    dtype: str | None = None
    run: str | None = None
    experiment: str | None = None
    tracking_uri: str | None = None
    endpoint_url: str | None = None
    rank_pattern: str | None = None
    include_deleted: bool = False

    def options(self, metric_overrides: dict[str, str] | None = None) -> ReadOptions:
        """The reader's options; `metric_overrides` for a command whose --metric is its own
        (`ranks`, `compare`), else this `metric` as NAME=LOGKEY pairs. A bad value is a
        StabUsageError."""
        from stabilitycli.ingest.options import ReadOptions

        if metric_overrides is None:
            metric_overrides = pairs(self.metric, "--metric")
        return ReadOptions(
            format_in=self.format_in,
            metric_overrides=metric_overrides,
            step_key=self.step_key,
            rank_key=self.rank_key,
            dtype=self.dtype,
            run=self.run,
            experiment=self.experiment,
            tracking_uri=self.tracking_uri,
            endpoint_url=self.endpoint_url,
            rank_pattern=self.rank_pattern,
            include_deleted=self.include_deleted,
            pattern=self.pattern,
        )


# one typer option per ReadArgs field, in the order `stab analyze --help` lists them
READ_OPTIONS: dict[str, Any] = {
    "metric": Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-m",
            help="Map a canonical metric to a log key, e.g. loss=train/my_loss (repeatable).",
        ),
    ],
    "step_key": Annotated[str | None, typer.Option(help="Log key holding the step.")],
    "rank_key": Annotated[str | None, typer.Option(help="Log key holding the rank.")],
    "format_in": Annotated[
        str | None, typer.Option(help="Input format, when detection guesses wrong.")
    ],
    "pattern": Annotated[
        str | None,
        typer.Option(
            help="Read a text log with this regex: named groups are fields, the group "
            "named step the step (example below)."
        ),
    ],
    "dtype": Annotated[str | None, typer.Option(help="dtype regime: fp32, fp16 or bf16.")],
    "run": Annotated[
        str | None, typer.Option(help="Run id or name inside a store with several runs.")
    ],
    "experiment": Annotated[str | None, typer.Option(help="Experiment name or id (MLflow).")],
    "tracking_uri": Annotated[str | None, typer.Option(help="MLflow tracking server URI.")],
    "endpoint_url": Annotated[
        str | None,
        typer.Option(
            help="Endpoint of an S3-compatible store for s3:// paths (MinIO, R2...; "
            "default: AWS_ENDPOINT_URL)."
        ),
    ],
    "rank_pattern": Annotated[
        str | None, typer.Option(help="Regex with one group: the rank in a file name.")
    ],
    "include_deleted": Annotated[bool, typer.Option(help="Also read MLflow runs marked deleted.")],
}


def takes_read_options(
    only: tuple[str, ...] | None = None,
    helps: Mapping[str, str] | None = None,
    then: Mapping[str, tuple[str, ...]] | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Replace the command's `read: ReadArgs` parameter by the read options themselves.

    `only`: the options this command offers, in its --help order (default: all of them,
    in declaration order); the others keep their defaults. `helps`: help text worded for
    this command. `then`: the command's own options that --help lists right after a
    read option (`{"dtype": ("select",)}`), so a listing users know keeps its order.
    """
    names = only or tuple(READ_OPTIONS)

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = inspect.signature(command, eval_str=True).parameters
        if own.get("read") is None or own["read"].annotation is not ReadArgs:
            raise TypeError(f"{command.__qualname__} has no parameter `read: ReadArgs`")
        if not set(then or {}) <= set(names):  # its options would vanish from --help
            raise TypeError(f"{command.__qualname__}: `then` names a read option not taken")
        placed_later = {name for after in (then or {}).values() for name in after}
        params: list[inspect.Parameter] = []
        for param in own.values():
            if param.name in placed_later:
                continue
            if param.name != "read":
                params.append(param)
                continue
            for name in names:
                params.append(_read_parameter(name, (helps or {}).get(name)))
                params.extend(own[after] for after in (then or {}).get(name, ()))
        # keyword-only: a required option may follow one with a default, as on a command line
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

        @functools.wraps(command)
        def run(**values: Any) -> None:
            read = ReadArgs(**{name: values.pop(name) for name in names})
            command(read=read, **values)

        # what typer reads: the signature above, its annotations already objects
        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def _read_parameter(name: str, help_text: str | None) -> inspect.Parameter:
    annotation = READ_OPTIONS[name]
    if help_text is not None:
        kind, info = get_args(annotation)
        info = copy.copy(info)
        info.help = help_text
        annotation = Annotated[kind, info]
    default = next(f.default for f in fields(ReadArgs) if f.name == name)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )
