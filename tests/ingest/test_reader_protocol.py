"""Every reader module in READERS provides what `ingest.base.Reader` says (the typed contract)."""

from __future__ import annotations

import inspect

import pytest

from stabilitycli.ingest import READERS, reader
from stabilitycli.ingest.base import Reader, UriReader


def _positional(function) -> int:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in inspect.signature(function).parameters.values())


@pytest.mark.parametrize("name", READERS)
def test_reader_module_satisfies_the_protocol(name: str) -> None:
    module = reader(name)
    assert isinstance(module, Reader)
    assert name == module.NAME  # the name READERS and --format-in use
    assert _positional(module.sniff) == 2  # (path, head)
    assert _positional(module.read) == 2  # (path, options)
    if hasattr(module, "sniff_uri"):
        assert isinstance(module, UriReader)
        assert _positional(module.sniff_uri) == 1


def test_uri_readers_are_the_mlflow_stores() -> None:
    uri_readers = {name for name in READERS if isinstance(reader(name), UriReader)}
    assert uri_readers == {"mlflow_file", "mlflow_db", "mlflow_server"}
