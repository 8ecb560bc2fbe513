"""`core.records.dataclass` makes what `dataclasses.dataclass` makes (start-up, #40): each
shape of class stab declares, made both ways, is compared on what a caller can see."""

from __future__ import annotations

import copy
import dataclasses
import math
import subprocess
import sys
from dataclasses import KW_ONLY, field  # noqa: F401 (the annotations below name it)
from typing import Any, ClassVar

import pytest

from stabilitycli.core import records


def _both(
    body: dict[str, Any], annotations: dict[str, str], module: str = "math", **flags: Any
) -> tuple[type, type]:
    """The same class made by `dataclasses.dataclass` and by `records.dataclass`, as if
    declared in `module` (one that imports neither ClassVar nor KW_ONLY by default)."""
    made = []
    for decorate in (dataclasses.dataclass, records.dataclass):
        namespace = {**body, "__annotations__": dict(annotations), "__module__": module}
        made.append(decorate(type("Shape", (), namespace), **flags))
    return made[0], made[1]


SHAPES: dict[str, tuple[dict[str, Any], dict[str, str], dict[str, Any]]] = {
    "plain": ({"b": 2.5}, {"a": "int", "b": "float"}, {}),
    "frozen": ({"b": None}, {"a": "int", "b": "str | None"}, {"frozen": True}),
    "factory": (
        {"items": field(default_factory=list), "tag": field(default="x", repr=False)},
        {"a": "int", "items": "list[int]", "tag": "str"},
        {},
    ),
    "kw-only field first": (
        {"cause": field(default="reset", kw_only=True), "b": field(default=1, compare=False)},
        {"cause": "str", "a": "int", "b": "int"},
        {"frozen": True, "eq": False, "repr": False},
    ),
    "all kw-only": ({"a": 1, "b": 2}, {"a": "int", "b": "int"}, {"kw_only": True, "frozen": True}),
    "init=False factory": (
        {"seen": field(init=False, default_factory=dict), "n": field(init=False, default=0)},
        {"a": "int", "seen": "dict[str, int]", "n": "int"},
        {},
    ),
    "no fields": ({}, {}, {"frozen": True}),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_instances_read_alike(shape: str) -> None:
    body, annotations, flags = SHAPES[shape]
    generated, ours = _both(body, annotations, **flags)
    names = [f.name for f in dataclasses.fields(generated)]
    assert names == [f.name for f in dataclasses.fields(ours)]
    assert ours.__doc__ == generated.__doc__
    assert getattr(ours, "__match_args__", None) == getattr(generated, "__match_args__", None)
    args = {f.name: i for i, f in enumerate(dataclasses.fields(generated)) if f.init}
    args["a"] = math.nan if "a" in args else None  # equal only as the same object
    args = {k: v for k, v in args.items() if v is not None}
    one, two = generated(**args), ours(**args)
    if flags.get("repr", True):
        assert repr(one) == repr(two)
    assert vars(one) == vars(two) and list(vars(one)) == list(vars(two))
    for make in (generated, ours):
        a, b = make(**args), make(**args)
        if flags.get("eq", True):
            assert a == b and a == dataclasses.replace(b) and a != object()
        if flags.get("frozen") and flags.get("eq", True):
            assert hash(a) == hash(b)
    assert (generated.__hash__ is None) == (ours.__hash__ is None)
    assert vars(copy.deepcopy(two)) == vars(two)  # as a pickle rebuilds it


def test_positional_and_errors() -> None:
    generated, ours = _both(*SHAPES["factory"][:2])
    for make in (generated, ours):
        assert make(1, [2], "y").items == [2] and make(1).items == []
        assert make(1).items is not make(1).items  # a fresh list each
        for bad in ((), (1, [], "t", 4)):
            with pytest.raises(TypeError):
                make(*bad)
        with pytest.raises(TypeError):
            make(1, a=2)
        with pytest.raises(TypeError):
            make(1, nope=2)


def test_frozen_refuses_assignment_and_post_init_runs() -> None:
    seen: list[int] = []

    def post(self: Any) -> None:
        seen.append(self.a)
        object.__setattr__(self, "double", self.a * 2)

    for decorate in (dataclasses.dataclass, records.dataclass):
        namespace = {"__annotations__": {"a": "int"}, "__post_init__": post}
        made = decorate(frozen=True)(type("Made", (), namespace))
        one = made(4)
        assert one.double == 8
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'a'"):
            one.a = 5
        with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'a'"):
            del one.a
    assert seen == [4, 4]


def test_subclasses() -> None:
    @records.dataclass(frozen=True)
    class Base:
        a: int

    @records.dataclass(frozen=True)
    class Sub(Base):
        b: int = 0

    assert Sub(1, 2) == Sub(a=1, b=2) != Base(1)
    assert [f.name for f in dataclasses.fields(Sub)] == ["a", "b"]
    with pytest.raises(TypeError, match="mixed"):

        @records.dataclass
        class Thawed(Base):
            c: int = 0

    # dataclasses.dataclass over one of ours, and ours over one of its own
    @dataclasses.dataclass(frozen=True)
    class Generated(Sub):
        c: int = 0

    @records.dataclass(frozen=True)
    class Over(Generated):
        d: int = 0

    assert Base.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert Over(1, d=4) == Over(1, 0, 0, 4) and Generated(1, c=3).c == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        Over(1).d = 2  # type: ignore[misc]


def test_the_class_body_keeps_its_own_methods() -> None:
    @records.dataclass(frozen=True)
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert repr(Own(1)) == "own" and Own(1) == Own(2) and hash(Own(1)) == 7


def test_a_default_before_a_required_field_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b'"):
        _both({"a": 1}, {"a": "int", "b": "int"})


def _fields_seen(cls: type) -> list[tuple[Any, ...]]:
    return [
        (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.kw_only)
        for f in dataclasses.fields(cls)
    ]


def test_fields_read_alike_whatever_the_annotations() -> None:
    # plain string annotations, and ones naming ClassVar or KW_ONLY: the same fields, class
    # attributes and __match_args__ as dataclasses gives
    metadata = {"quantity": "count"}
    body = {
        "b": field(default=2, metadata=metadata),
        "items": field(default_factory=list),
        "c": field(default="z", kw_only=True),
        "limit": 3,
    }
    plain_text = {"a": "int", "b": "int", "items": "list[int]", "c": "str"}
    for declared, module in (
        (plain_text, "math"),
        (plain_text, __name__),
        (
            {"a": "int", "limit": "ClassVar[int]", "b": "int", "items": "list[int]", "c": "str"},
            __name__,
        ),
        ({"a": "int", "_": "KW_ONLY", "b": "int", "items": "list[int]", "c": "str"}, __name__),
    ):
        generated, ours = _both(body, declared, module, frozen=True)
        assert _fields_seen(ours) == _fields_seen(generated)
        assert ours.__match_args__ == generated.__match_args__  # type: ignore[attr-defined]
        for name in ("b", "items", "c", "limit"):
            assert getattr(ours, name, None) == getattr(generated, name, None)
        assert {f.name: f.metadata for f in dataclasses.fields(ours)}["b"] == metadata
    with pytest.raises(ValueError, match="mutable default"):
        _both({"a": []}, {"a": "list[int]"})
    with pytest.raises(TypeError, match="has no type annotation"):
        records.dataclass(type("Bare", (), {"a": field(default=1), "__module__": "math"}))


# a ClassVar under another name in this module: a string naming it is a class variable
_Shared = ClassVar


def test_plain_annotations_read_once_and_put_back() -> None:
    # `records` tells dataclasses which strings are plain fields (#40): a ClassVar or
    # KW_ONLY under another name, or behind a module, is still read by dataclasses itself,
    # and every annotation and field type is the string the class body wrote
    body = {"limit": 3, "cap": 4, "b": field(default=2)}
    declared = {
        "a": "int",
        "limit": "_Shared[int]",
        # this module has no `typing`: to dataclasses a field like any other
        "cap": "typing.ClassVar[int]",
        "_": "KW_ONLY",
        "b": "Any",
        "items": " list[int]",
    }
    body["items"] = field(default_factory=list)
    generated, ours = _both(body, declared, __name__)
    assert _fields_seen(ours) == _fields_seen(generated)
    assert [(f.name, f.type) for f in dataclasses.fields(ours)] == [
        ("a", "int"),
        ("cap", "typing.ClassVar[int]"),
        ("b", "Any"),
        ("items", " list[int]"),
    ]
    assert ours.__annotations__ == declared
    assert ours.__match_args__ == generated.__match_args__  # type: ignore[attr-defined]


def test_string_annotations_on_newer_pythons() -> None:
    # a module with `from __future__ import annotations` (every module of stab), made on each
    # other Python this machine has: records must not lean on dataclasses' private classes,
    # whose signatures differ between versions
    import shutil
    from pathlib import Path

    root = Path(records.__file__).resolve().parents[2]
    source = (
        "from __future__ import annotations\n"
        f"import sys; sys.path.insert(0, {str(root)!r})\n"
        "from stabilitycli.core import records\n"
        "@records.dataclass(frozen=True)\n"
        "class Point:\n"
        "    x: int\n"
        "    y: int = 2\n"
        "print(Point(1))\n"
    )
    found = [p for v in ("3.12", "3.13") if (p := shutil.which(f"python{v}"))]
    # a name on PATH may be a shim with no interpreter behind it
    others = [
        p for p in found if subprocess.run([p, "-c", "pass"], capture_output=True).returncode == 0
    ]
    if not others:
        pytest.skip("no Python 3.12 or 3.13 here")
    for python in others:
        done = subprocess.run([python, "-c", source], capture_output=True, text=True)
        if "No module named" in done.stderr:
            continue  # an interpreter without what stabilitycli.core imports
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "Point(x=1, y=2)"


# runs a small `stab analyze` in-process, then names every method of a stabilitycli class
# that was compiled from a string while it ran (what @dataclass writes; #40)
_PROBE = """
import sys, io, contextlib
from stabilitycli.cli import main
sys.argv = ["stab", "analyze", "fixtures/runs/healthy-hf-style/run.jsonl"]
try:
    with contextlib.redirect_stdout(io.StringIO()):
        main()
except SystemExit:
    pass
compiled = []
for name, module in list(sys.modules.items()):
    if not name.startswith("stabilitycli"):
        continue
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == name:
            for method, fn in vars(value).items():
                code = getattr(fn, "__code__", None)
                if code is not None and code.co_filename == "<string>":
                    compiled.append(f"{value.__qualname__}.{method}")
# the control: a class typer's own @dataclass made, whose methods it compiled
from typer._coercion import RuntimeParam
seen = RuntimeParam.__init__.__code__.co_filename == "<string>"
print(len([m for m in sys.modules if m.startswith("stabilitycli")]), seen, *sorted(compiled))
"""


def test_a_small_analysis_compiles_no_method_of_stab() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    modules, seen, *compiled = done.stdout.split()
    assert int(modules) > 50  # the analysis ran
    # the probe sees what @dataclass compiles: typer's own dataclass shows it
    assert seen == "True"
    assert compiled == []
