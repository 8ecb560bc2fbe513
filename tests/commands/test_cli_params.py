"""Every `stab` parameter receives what typer's own conversion would give it.

`commands/_params.py` keeps values that need no converting away from typer's pydantic
adapters (importing pydantic was a tenth of a small run); here every parameter of every
command is fed the values a command line, an environment variable or a default can give,
through both, and must come out the same: the same value of the same type, or the same
error with the same message.
"""

from __future__ import annotations

from enum import Enum

import pytest
import typer.main
from typer import _click
from typer._coercion import build_runtime_param
from typer.core import TyperGroup

from stabilitycli.cli import COMMANDS, app
from stabilitycli.commands._params import _AsGiven

GROUP = typer.main.get_command(app)
assert isinstance(GROUP, TyperGroup)


def _params() -> list[tuple[str, _click.Command, _click.Parameter]]:
    ctx = _click.Context(GROUP, info_name="stab")
    found = [("stab", GROUP, p) for p in GROUP.get_params(ctx)]
    for name in COMMANDS:
        command = GROUP.commands[name]
        sub = _click.Context(command, info_name=name, parent=ctx)
        found += [(name, command, p) for p in command.get_params(sub)]
    return found


def _samples(param) -> list[object]:
    annotation = param.type_descriptor.annotation
    values: list[object] = [None, param.default, (), [], ("a", "b"), ["x"], ("a", 1), "x"]
    values += ["", "3", "-2", " 4 ", "1.5", "nan", "true", "False", 3, 0, 1.5, True, False]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        for member in annotation:
            values += [member, member.value, str(member.value).upper(), (member.value,)]
    return values


def _outcome(runtime, value, param, ctx) -> tuple[str, object]:
    try:
        got = runtime.coerce(value, param=param, ctx=ctx)
    except Exception as err:
        return ("error", f"{type(err).__name__}: {err}")
    # NaN (a float option given "nan") is not equal to itself: compared by its text
    return (type(got).__name__, got if got == got else repr(got))


PARAMS = _params()


@pytest.mark.parametrize(
    ("command", "param"),
    [(c, p) for _, c, p in PARAMS],
    ids=[f"{n}-{p.name}" for n, _, p in PARAMS],
)
def test_a_parameter_gets_what_typer_would_give_it(command, param) -> None:
    ctx = _click.Context(command, info_name=command.name)
    desc = param.type_descriptor
    ours = _AsGiven(annotation=desc.annotation, parameter_info=desc.parameter_info, descriptor=desc)
    typers = build_runtime_param(desc)
    for value in _samples(param):
        assert _outcome(ours, value, param, ctx) == _outcome(typers, value, param, ctx), value


def test_every_parameter_is_compared() -> None:
    names = {n for n, _, _ in PARAMS}
    assert names == {"stab", *COMMANDS}
    kinds = {repr(p.type_descriptor.annotation) for _, _, p in PARAMS}
    # strings, flags, numbers, paths, lists and choices are all in the comparison
    assert {"<class 'str'>", "<class 'bool'>", "<class 'int'>", "list[str]"} <= kinds
    assert any(p.type_descriptor.is_path for _, _, p in PARAMS)
    assert any(p.type_descriptor.is_choice for _, _, p in PARAMS)
    assert any(p.type_descriptor.is_ranged for _, _, p in PARAMS)


def test_the_typer_installed_is_one_the_pin_allows() -> None:
    """The comparison above is what lets pyproject.toml pin typer where it does."""
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("typer")]
    lowest, below = (part.strip(">=<") for part in pin.removeprefix("typer").split(","))

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    assert version(lowest) <= version(typer.__version__) < version(below), pin
