"""Option values checked as typer checks them, without pydantic when nothing needs converting.

typer (0.29) converts each parameter's value through a pydantic TypeAdapter it builds the
first time the parameter is processed, even when the value is absent or already the
option's own default: a bare `stab analyze run.jsonl` imported pydantic (0.15 s, a tenth
of the run) to hand back values that were right as they came. The command classes here
give each parameter, before parsing, a stand-in that returns such values unchanged, as
typer's adapter would, and passes every other value to typer's own conversion (built
then), so conversions, errors and their messages stay typer's. Nothing here changes what
a command receives: tests/commands/test_cli_params.py compares the two on every parameter.

These are typer's private modules, so pyproject.toml pins typer to 0.29.x, the versions
whose `_coercion`, `_param_types` and `core` the comparison has run on; a newer typer is
taken in by moving the pin once that test passes on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Any, get_args

from typer import _click
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer._param_types import coerce_cli_choice
from typer.core import TyperCommand, TyperGroup, _TyperParameter

# `_as_given`'s answer for a value that typer's own conversion has to see
_CONVERT = object()


class _AsGiven(RuntimeParam):
    # not a dataclass of its own: over typer's dataclass, `@dataclass` wrote and compiled
    # six methods at every start-up (~3M instructions; #40) for one more attribute
    descriptor: TypeDescriptor

    def __init__(self, *, parameter_info: Any, annotation: Any, descriptor: TypeDescriptor) -> None:
        super().__init__(parameter_info=parameter_info, annotation=annotation)
        object.__setattr__(self, "descriptor", descriptor)  # frozen, as typer's own

    @cached_property
    def _typers(self) -> RuntimeParam:
        return build_runtime_param(self.descriptor)

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: _click.Context) -> Any:
        kept = _as_given(self.descriptor, value, ctx)
        if kept is _CONVERT:
            return self._typers._coerce_value(value, param=param, ctx=ctx)
        return kept


def _as_given(descriptor: TypeDescriptor, value: Any, ctx: _click.Context) -> Any:
    """The value typer's adapter would return, when it is the value given (or a list of
    it); `_CONVERT` when typer has to convert, check bounds, open a file or refuse it."""
    info, annotation = descriptor.parameter_info, descriptor.annotation
    if info.parser is not None or descriptor.is_file or descriptor.is_path or descriptor.is_ranged:
        return _CONVERT
    if descriptor.is_list:
        words = isinstance(value, (list, tuple)) and all(type(v) is str for v in value)
        return list(value) if get_args(annotation) == (str,) and words else _CONVERT
    if descriptor.is_choice:
        try:
            # typer's own matching: a member as is, a word to its member (case, normalizer)
            choices = descriptor.choices or ()
            return coerce_cli_choice(
                value, choices=choices, case_sensitive=descriptor.case_sensitive, ctx=ctx
            )
        except ValueError:  # not a choice: typer words the error
            return _CONVERT
    if annotation in (str, bool, int, float) and type(value) is annotation:
        return value
    return _CONVERT


def _defer(params: Iterable[_click.Parameter]) -> None:
    for param in params:
        # a parameter typer has converted before (or gave its own way) keeps it
        if isinstance(param, _TyperParameter) and param._runtime_param is None:
            desc = param.type_descriptor
            param._runtime_param = _AsGiven(
                annotation=desc.annotation, parameter_info=desc.parameter_info, descriptor=desc
            )


# `--help` groups a command's options by what they are about, in this order
PANELS: dict[str, tuple[str, ...]] = {
    "Input": (
        "metric", "step_key", "rank_key", "format_in", "pattern", "dtype", "run",
        "experiment", "tracking_uri", "endpoint_url", "rank_pattern", "include_deleted",
    ),
    "Rules": ("select", "ignore", "set_values", "fail_on", "tolerance", "expect", "until"),
    "Output": ("output", "quiet", "verbose", "show_settings", "x", "js"),
    "Many runs": (
        "recursive", "jobs", "engine", "ray_address", "retries", "time_limit", "results",
    ),
}  # fmt: skip
_PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}


def _tidy_help(command: _click.Command, ctx: _click.Context) -> None:
    """What `--help` shows of each parameter at 80 columns: a flag without a `<bool>`
    type, a value's type only when it is a choice, and the options in their panels, the
    panels in the order of `PANELS` (typer lists a panel where its first option comes)."""
    order = list(PANELS)

    def rank(param: _click.Parameter) -> int:
        panel = _PANEL_OF.get(param.name or "")
        return order.index(panel) if panel else len(order)

    command.params.sort(key=rank)  # stable: each panel keeps its options' order
    for param in command.get_params(ctx):
        if not isinstance(param, _TyperParameter):
            continue
        flag = getattr(param, "is_flag", False) or param.type_descriptor.annotation is bool
        if flag or (not param.type_descriptor.is_choice and param.metavar is None):
            # a method looked up on the instance first: this parameter only
            param.display_type_rich = _no_type  # type: ignore[method-assign]
        if getattr(param, "rich_help_panel", None) is None and param.name in _PANEL_OF:
            setattr(param, "rich_help_panel", _PANEL_OF[param.name])  # noqa: B010 (typer, untyped)


def _no_type(ctx: _click.Context) -> None:
    return None


class Group(TyperGroup):
    """`stab` itself: its options (completion, help) processed without pydantic."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        _defer(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def format_help(self, ctx: _click.Context, formatter: Any) -> None:
        _tidy_help(self, ctx)
        super().format_help(ctx, formatter)


class Command(TyperCommand):
    """A `stab` command: its options processed without pydantic when already right."""

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        _defer(self.get_params(ctx))
        return super().parse_args(ctx, args)

    def format_help(self, ctx: _click.Context, formatter: Any) -> None:
        _tidy_help(self, ctx)
        super().format_help(ctx, formatter)
