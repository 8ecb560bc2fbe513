"""Every finding kind, declared beside its rule: one module here per rule module.

Importing this package declares them all (a kind registers itself in
`stabilitycli.core.model` when it is made); `all_kinds()` and `kind_named()` here
read the registry. No polars and no numpy here: renderers and `stab explain` read the
kinds without loading the rules.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from stabilitycli.core.model import FindingKind, declared_kinds, set_kind_lookup

# every module of the package, in the order they declare their kinds (a name's order):
# named, not listed from the directory, which took pkgutil's import at every start-up
# (#40); tests/detect/test_kinds.py checks that no module of the package is left out
MODULES = (
    "data",
    "divergence",
    "eval",
    "learning",
    "mixed_precision",
    "nan",
    "ranks",
    "restart_replay",
    "restarts",
    "schedule",
    "spike",
    "throughput",
)


def _declare_all() -> None:
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")


def all_kinds() -> Mapping[str, FindingKind]:
    """Every finding kind by code, in the order their modules declare them."""
    return declared_kinds()


def kind_named(code: str) -> FindingKind:
    """The kind of a finding code; KeyError for a code no rule emits."""
    return declared_kinds()[code]


_declare_all()
set_kind_lookup(kind_named)
