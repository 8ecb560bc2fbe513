"""The `stab` app itself: every command registered, and `--version`."""

from __future__ import annotations

import importlib
import importlib.metadata

import stabilitycli
from stabilitycli.cli import COMMANDS


def test_version_is_the_package_version(cli) -> None:
    result = cli("--version")
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 0
    assert result.stdout == f"stab {stabilitycli.__version__}\n"


def test_installed_metadata_reads_the_same_version() -> None:
    # pyproject.toml takes the version from stabilitycli.__version__ (one place)
    assert importlib.metadata.version("stabilitycli") == stabilitycli.__version__


def test_every_command_module_is_registered(cli) -> None:
    result = cli("--help")
    assert result.exit_code == 0
    for name in COMMANDS:
        assert callable(importlib.import_module(f"stabilitycli.commands.{name}").command)
        assert name in result.stdout
