"""The thresholds in force for one run, and where each one came from.

`load_settings(near, cli_values)` returns the same `Thresholds` as
`config.load_config` and, beside them, a `Settings`: per threshold its value,
its default and its source - `default`, the config file and key
(`/repo/pyproject.toml [tool.stab] spike_sigma`, `/runs/stab.toml spike_sigma`),
or the flag (`--set spike_sigma=4`). Commands put `Settings.to_dict()` in the
analysis (`Analysis.extras["settings"]`, the JSON's `settings`) when any
threshold differs from its default, and every renderer says which and where
from; `stab analyze --show-settings` prints them all.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from stabilitycli.config import THRESHOLD_NAMES, Thresholds, _find_config_file
from stabilitycli.errors import StabUsageError


@dataclass(frozen=True)
class Setting:
    name: str
    value: Any
    default: Any
    source: str  # "default", "<file> [tool.stab] <key>", "<file> <key>" or "--set name=value"

    @property
    def changed(self) -> bool:
        return self.value != self.default

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "default": self.default,
            "source": self.source,
        }


@dataclass(frozen=True)
class Settings:
    entries: tuple[Setting, ...]

    def changed(self) -> list[Setting]:
        """The thresholds whose value differs from the default, in field order."""
        return [s for s in self.entries if s.changed]

    def to_dict(self) -> dict[str, Any]:
        """What goes in the analysis: only the thresholds that are not at their defaults."""
        return {"non_default": [s.to_dict() for s in self.changed()]}


def load_settings(
    near: str | Path | None = None, cli_values: dict[str, str] | None = None
) -> tuple[Thresholds, Settings]:
    """Defaults <- [tool.stab] / stab.toml above the run <- --set, with each value's source."""
    thresholds = Thresholds()
    sources = {spec.name: "default" for spec in fields(Thresholds)}
    text = str(near) if near is not None else ""
    start = Path(text) if text and "://" not in text and os.path.exists(text) else Path.cwd()
    found = _find_config_file(start)
    if found is not None:
        path, table = found
        _check_names(table, str(path))
        thresholds = thresholds.with_overrides(table, str(path))
        where = f"{path} [tool.stab]" if path.name == "pyproject.toml" else str(path)
        for key in table:
            sources[_name(key)] = f"{where} {key}"
    if cli_values:
        _check_names(cli_values, "--set")
        thresholds = thresholds.with_overrides(cli_values, "--set")
        for key, raw in cli_values.items():
            sources[_name(key)] = f"--set {key}={raw}"
    default = Thresholds()
    entries = tuple(
        Setting(
            spec.name,
            getattr(thresholds, spec.name),
            getattr(default, spec.name),
            sources[spec.name],
        )
        for spec in fields(Thresholds)
    )
    return thresholds, Settings(entries)


def _name(key: str) -> str:
    return key.replace("-", "_")


def _check_names(values: dict[str, Any], origin: str) -> None:
    """An unknown threshold is refused with the closest names and where to find them all."""
    for key in values:
        if _name(key) not in THRESHOLD_NAMES:
            close = difflib.get_close_matches(_name(key), sorted(THRESHOLD_NAMES), n=3)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise StabUsageError(
                f"{origin}: unknown threshold {key!r}; {hint}"
                "`stab explain thresholds` lists them all"
            )


def sentence(settings: dict[str, Any] | None) -> str | None:
    """'Thresholds not at their defaults: spike_sigma = 4 (default 3; from --set ...).'"""
    changed = (settings or {}).get("non_default") or []
    if not changed:
        return None
    parts = [
        f"{s['name']} = {s['value']:g} (default {s['default']:g}; from {s['source']})"
        for s in changed
    ]
    return "Thresholds not at their defaults: " + "; ".join(parts) + "."
