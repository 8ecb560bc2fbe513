"""The thresholds in force for one run, and where each one came from.

`load_settings(near, cli_values)` is the one loader of thresholds: the `Thresholds`
in force and, beside them, a `Settings`: per threshold its value,
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
import tomllib
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

from stabilitycli.core.config import THRESHOLD_NAMES, Thresholds, default_thresholds
from stabilitycli.core.errors import StabUsageError
from stabilitycli.core.records import dataclass


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
    thresholds = default_thresholds()
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
    default = default_thresholds()
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


def _find_config_file(start: Path) -> tuple[Path, dict[str, Any]] | None:
    """The first stab.toml, or pyproject.toml with a [tool.stab] table, from `start`'s
    folder upwards, and its thresholds table."""
    folder = start if _looks_in(start, Path.is_dir) else start.parent
    for candidate in [folder, *folder.resolve().parents]:
        stab_toml = candidate / "stab.toml"
        if _looks_in(stab_toml, Path.is_file):
            return stab_toml, _load_table(stab_toml, section=None)
        pyproject = candidate / "pyproject.toml"
        if _looks_in(pyproject, Path.is_file):
            table = _load_table(pyproject, section="stab")
            if table:
                return pyproject, table
    return None


def _looks_in(path: Path, test: Callable[[Path], bool]) -> bool:
    """`test(path)`, False where stab may not look (a folder without search permission):
    a config there cannot be read, and the search goes on above it."""
    try:
        return test(path)
    except OSError:
        return False


# TOML arrays and inline tables a config may nest: real ones nest 2 or 3 deep, and the
# parser recurses once a level
CONFIG_MAX_DEPTH = 64


def _nesting_depth(text: str) -> int:
    """How deep `[` and `{` nest outside strings and comments, counted without recursion
    (table headers count as the brackets they are: one or two)."""
    depth = deepest = 0
    quote = ""
    escaped = False
    in_comment = False
    for char in text:
        if in_comment:
            in_comment = char != "\n"
        elif quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            in_comment = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def _load_table(path: Path, section: str | None) -> dict[str, Any]:
    try:
        text = path.read_text()
        # no deeper than its brackets are many: a config with few is not walked a character
        # at a time (this repository's pyproject.toml, 5,000 characters, took ~3M instructions; #40)
        few = text.count("[") + text.count("{") <= CONFIG_MAX_DEPTH
        if not few and (depth := _nesting_depth(text)) > CONFIG_MAX_DEPTH:
            raise StabUsageError(
                f"{path}: cannot read config: arrays and tables nested {depth:,} deep "
                f"(nested too deep; a config needs no more than {CONFIG_MAX_DEPTH})"
            )
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise StabUsageError(f"{path}: cannot read config: {err}") from None
    except RecursionError:  # the bound above counts brackets in strings out: a last resort
        raise StabUsageError(f"{path}: cannot read config: nested too deep to parse") from None
    if section is None:
        return _table(path, data, "thresholds")
    tool = _table(path, data, "tool", fallback={})
    ours = _table(path, tool, section, fallback={}, where=f"[tool.{section}]")
    return _table(path, ours, "thresholds", where=f"[tool.{section}.thresholds]")


def _table(
    path: Path, data: dict[str, Any], key: str, fallback: Any = None, where: str = ""
) -> dict[str, Any]:
    """`data[key]` when it is a table (`data` itself when absent, unless `fallback`); a
    value of another kind there (`thresholds = -1`) is one usage error naming it."""
    found = data.get(key, data if fallback is None else fallback)
    if not isinstance(found, dict):
        shown = where or f"[{key}]"
        raise StabUsageError(
            f"{path}: {shown} must be a table of settings, not a {type(found).__name__}"
        )
    return found


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
        f"{s['name']} = {shown(s['value'])} (default {shown(s['default'])}; from {s['source']})"
        for s in changed
    ]
    return "Thresholds not at their defaults: " + "; ".join(parts) + "."


def shown(value: Any) -> str:
    """A setting as said: a number in %g, a list of steps comma-separated, a flag as a word."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "none"
    return f"{value:g}"
