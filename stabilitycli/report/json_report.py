"""The `stab.analysis/1` JSON document (docs/contract.md)."""

from __future__ import annotations

import json

from stabilitycli.core.model import Analysis


def render(analysis: Analysis) -> str:
    # allow_nan=False: any NaN that slipped past `jsonable` is a bug, not output
    return json.dumps(analysis.to_dict(), indent=2, allow_nan=False)
