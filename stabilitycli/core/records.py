"""`@dataclass` without writing source: the same classes, made at a fraction of the start-up.

Python 3.11's `@dataclass` writes `__init__`, `__repr__`, `__eq__`, `__hash__` and a frozen
class's `__setattr__`/`__delattr__` out as source and compiles each with its own `exec`, in
every process (no bytecode cache holds them): for the hundred-odd classes a small
`stab analyze` defines, some 270,000 characters, a fifth of its instructions (issue #40,
docs/scale.md). This one lets `dataclasses` read the fields (so `fields`, `replace`,
`asdict` and `is_dataclass` work as before) but generate nothing, and gives each class
methods shared by all, closed over its fields: they do what the generated ones do (the
same values set in the same order, `__post_init__`, equality and hash over the same
tuples, the same repr and the same errors on a frozen field), at a few microseconds more a
call, which no class made per row pays. `tests/core/test_records.py` holds them to the
generated ones.

mypy reads `dataclasses.dataclass` here, so a class is checked as a dataclass.
`order`, `unsafe_hash` and `slots`, and a class over a dataclass made elsewhere, go to
`dataclasses.dataclass` itself; an `InitVar` is refused (no class of stab has one).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import reprlib
import sys
import typing
import weakref
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError
from operator import attrgetter
from typing import TYPE_CHECKING, Any

# the classes made here: dataclasses is told they are not frozen while it reads a subclass's
# fields (see `_record`)
_MADE: weakref.WeakSet[type] = weakref.WeakSet()

if TYPE_CHECKING:
    from dataclasses import dataclass as dataclass
else:

    def dataclass(
        cls: type | None = None,
        /,
        *,
        init: bool = True,
        repr: bool = True,
        eq: bool = True,
        order: bool = False,
        unsafe_hash: bool = False,
        frozen: bool = False,
        match_args: bool = True,
        kw_only: bool = False,
        slots: bool = False,
    ) -> Any:
        flags = dict(init=init, repr=repr, eq=eq, frozen=frozen)
        more = dict(match_args=match_args, kw_only=kw_only)

        def wrap(made: type) -> type:
            if order or unsafe_hash or slots or _over_foreign_dataclass(made):
                rest = dict(order=order, unsafe_hash=unsafe_hash, slots=slots)
                return dataclasses.dataclass(made, **flags, **rest, **more)
            return _record(made, flags, **more)

        return wrap if cls is None else wrap(cls)


def _over_foreign_dataclass(cls: type) -> bool:
    # a dataclass base made elsewhere (typer's): its own decorator is asked, as it would be
    return any(dataclasses.is_dataclass(b) and b not in _MADE for b in cls.__mro__[1:])


def _record(cls: type, flags: dict[str, bool], *, match_args: bool, kw_only: bool) -> type:
    frozen = flags["frozen"]
    bases = [b for b in cls.__mro__[1:] if b in _MADE]
    if bases and any(b.__dataclass_params__.frozen for b in bases) != frozen:  # type: ignore[attr-defined]
        # what @dataclass refuses: a frozen class over a mutable one, or the other way round
        raise TypeError(f"{cls.__name__}: frozen and non-frozen dataclasses mixed")
    if any("InitVar" in str(t) for t in inspect.get_annotations(cls).values()):
        raise TypeError(f"{cls.__name__}: an InitVar needs dataclasses.dataclass")
    # hash: what @dataclass decides from the same flags (its `_hash_action`), read first:
    # a class body that defines __eq__ has __hash__ = None in its dict from Python itself
    own_hash = cls.__dict__.get("__hash__", MISSING)
    explicit_hash = not (own_hash is MISSING or (own_hash is None and "__eq__" in cls.__dict__))
    undocumented = not cls.__doc__
    if undocumented:
        cls.__doc__ = "-"  # written below from the fields: @dataclass would ask inspect
    _read_fields(cls, bases, match_args=match_args, kw_only=kw_only)
    # what the class is, as @dataclass would have said it (a subclass made by
    # dataclasses.dataclass reads it)
    for name, value in flags.items():
        setattr(cls.__dataclass_params__, name, value)  # type: ignore[attr-defined]
    _MADE.add(cls)
    every = dataclasses.fields(cls)
    if flags["init"]:
        _put(cls, "__init__", _init(cls, every, frozen))
    if flags["repr"]:
        _put(cls, "__repr__", _repr([f.name for f in every if f.repr]))
    if flags["eq"]:
        _put(cls, "__eq__", _eq([f.name for f in every if f.compare]))
    if frozen:
        for method in _frozen(cls, {f.name for f in every}):
            if method.__name__ in cls.__dict__:
                raise TypeError(
                    f"Cannot overwrite attribute {method.__name__} in class {cls.__name__}"
                )
            _put(cls, method.__name__, method)
    if flags["eq"] and not explicit_hash:
        if frozen:
            hashed = [f.name for f in every if (f.compare if f.hash is None else f.hash)]
            cls.__hash__ = _hash(_values(hashed))  # type: ignore[method-assign,assignment]
        else:
            cls.__hash__ = None  # type: ignore[assignment]
    if undocumented:
        cls.__doc__ = cls.__name__ + _signature_text(every)
    return cls


def _read_fields(cls: type, bases: list[type], *, match_args: bool, kw_only: bool) -> None:
    # dataclasses reads the fields and writes nothing (no method, no frozen check: told the
    # bases are not frozen for this one call, as this class is not, to it). Not read here
    # instead: that takes dataclasses' private classes, whose signatures change between
    # Python versions (3.12's _DataclassParams takes ten arguments, 3.11's six)
    thawed = [b for b in bases if b.__dataclass_params__.frozen]  # type: ignore[attr-defined]
    for base in thawed:
        base.__dataclass_params__.frozen = False  # type: ignore[attr-defined]
    # the class's own dict of annotations, changed in place for the call (a copy would not
    # be what dataclasses reads)
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    plain = _plain_annotations(cls, own)
    for name in plain:
        own[name] = _PLAIN
    try:
        dataclasses.dataclass(
            cls,
            init=False,
            repr=False,
            eq=False,
            frozen=False,
            match_args=match_args,
            kw_only=kw_only,
        )
    finally:
        own.update(plain)
        for f in getattr(cls, "__dataclass_fields__", {}).values():
            if f.type is _PLAIN:
                f.type = plain[f.name]
        for base in thawed:
            base.__dataclass_params__.frozen = True  # type: ignore[attr-defined]


class _Plain:
    """What a class's string annotation that names no ClassVar, InitVar or KW_ONLY reads as
    while dataclasses reads its fields (`_plain_annotations`); the string is put back in
    the class's annotations and on its field right after."""


_PLAIN = _Plain()

# the name dataclasses reads at the start of a string annotation, with the module before it
# (`typing.ClassVar[int]`): the same pattern as its own
_LEADING_NAME = re.compile(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)")


def _plain_annotations(cls: type, own: dict[str, Any]) -> dict[str, str]:
    """The string annotations of `cls` that dataclasses would read as plain fields, by name.

    dataclasses asks of every string annotation, three times over (ClassVar? InitVar?
    KW_ONLY?), what the name at its start is bound to in the class's module: a regular
    expression and four lookups each time, some 20 million instructions over stab's classes
    at every start-up (#40). Here each string is read once: one without a module before its
    name, whose name is bound in the module to none of the three (nor to a ClassVar[...] or
    an InitVar[...]), is plain; any other is left to dataclasses, which asks as before."""
    module = sys.modules.get(cls.__module__)
    if module is None:
        return {}
    names = vars(module)
    plain = {}
    for name, annotation in own.items():
        if type(annotation) is not str:
            continue
        leading = _leading_name(annotation)
        if leading is None:
            continue
        value = names.get(leading)  # None for a builtin (`int`, `list[str]`)
        if value is None or not _special(value):
            plain[name] = annotation
    return plain


@functools.cache
def _leading_name(annotation: str) -> str | None:
    """The name at the start of a string annotation; None where a module comes before it
    (or no name starts it). Cached: stab's classes share a few hundred strings."""
    match = _LEADING_NAME.match(annotation)
    return None if match is None or match.group(1) else match.group(2)


def _special(value: Any) -> bool:
    """A ClassVar, an InitVar or KW_ONLY, as dataclasses tells them."""
    return (
        value is typing.ClassVar
        or typing.get_origin(value) is typing.ClassVar
        or value is dataclasses.InitVar
        or isinstance(value, dataclasses.InitVar)
        or value is dataclasses.KW_ONLY
    )


def _put(cls: type, name: str, method: Callable[..., Any]) -> None:
    # as @dataclass: a method the class body wrote itself is kept
    if name in cls.__dict__:
        return
    method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    setattr(cls, name, method)


def _values(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple @dataclass compares and hashes: `(self.a, self.b,)`."""
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    if not names:
        return lambda obj: ()
    return attrgetter(*names)


def _init(cls: type, fields_: tuple[Field[Any], ...], frozen: bool) -> Callable[..., None]:
    params = [f for f in fields_ if f.init and not f.kw_only]
    _check_defaults(params)
    params += [f for f in fields_ if f.init and f.kw_only]
    names = tuple(f.name for f in params)
    known = frozenset(names)
    positional = sum(1 for f in params if not f.kw_only)
    optional: tuple[tuple[str, Any, Any], ...] = tuple(
        (f.name, f.default, f.default_factory) for f in params if _has_default(f)
    )
    # what the generated body does, field by field in declaration order: a parameter's
    # value set, an init=False field's factory called (one with a plain default is left to
    # the class attribute)
    steps: tuple[tuple[str, bool, Any], ...] = tuple(
        (f.name, f.init, f.default_factory)
        for f in fields_
        if f.init or f.default_factory is not MISSING
    )
    post_init = hasattr(cls, "__post_init__")
    put = object.__setattr__ if frozen else setattr
    where = f"{cls.__qualname__}.__init__()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > positional:
            raise TypeError(
                f"{where} takes {positional + 1} positional arguments but {len(args) + 1} "
                "were given"
            )
        given = dict(zip(names, args, strict=False))
        if kwargs:
            for key in kwargs:
                if key in given:
                    raise TypeError(f"{where} got multiple values for argument {key!r}")
                if key not in known:
                    raise TypeError(f"{where} got an unexpected keyword argument {key!r}")
            given.update(kwargs)
        if len(given) < len(names):
            for name, default, factory in optional:
                if name not in given:
                    given[name] = default if factory is MISSING else factory()
            if len(given) < len(names):
                lost = [n for n in names if n not in given]
                raise TypeError(f"{where} missing {len(lost)} required argument(s): {lost}")
        for name, passed, factory in steps:
            put(self, name, given[name] if passed else factory())
        if post_init:
            self.__post_init__()

    return __init__


def _has_default(f: Field[Any]) -> bool:
    return f.default is not MISSING or f.default_factory is not MISSING


def _check_defaults(positional: list[Field[Any]]) -> None:
    # as @dataclass: a positional parameter without a default after one with a default
    seen_default = False
    for f in positional:
        if _has_default(f):
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")


def _repr(names: list[str]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({shown})"

    return __repr__


def _eq(names: list[str]) -> Callable[[Any, Any], Any]:
    values = _values(names)

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(values: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _frozen(cls: Any, names: set[str]) -> tuple[Callable[..., None], ...]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


def _signature_text(every: tuple[Field[Any], ...]) -> str:
    """The `(a: 'int', b: 'str' = 'x')` @dataclass puts after the name of a class without a
    docstring (its `__init__`'s signature, as `inspect` writes it), from its fields `every`."""

    fields_ = [f for f in every if f.init]
    shown: list[str] = []
    for kw_only in (False, True):
        group = [f for f in fields_ if f.kw_only is kw_only]
        if kw_only and group:
            shown.append("*")
        for f in group:
            text = f"{f.name}: {inspect.formatannotation(f.type)}"
            if f.default is not MISSING:
                text += f" = {f.default!r}"
            elif f.default_factory is not MISSING:
                text += " = <factory>"
            shown.append(text)
    return f"({', '.join(shown)})"
