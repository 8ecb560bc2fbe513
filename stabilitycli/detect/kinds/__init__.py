"""Every finding kind, declared beside its rule: one module here per rule module.

Importing this package declares them all (a kind registers itself in
`stabilitycli.core.model` when it is made); `model.all_kinds()` and `model.kind_named()`
read the registry. No polars and no numpy here: renderers and `stab explain` read the
kinds without loading the rules.
"""

from __future__ import annotations

import importlib
import pkgutil


def _declare_all() -> None:
    # every module of the package, so that a new rule's kinds need no line here
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{module}")


_declare_all()
