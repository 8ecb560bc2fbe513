"""Fixtures shared by the pipeline tests."""

from __future__ import annotations

import pytest

from stabilitycli.pipeline import batch


@pytest.fixture
def analysed(monkeypatch):
    """The runs analysed in this process (`--jobs 1` keeps them here), in order."""
    seen: list[str] = []
    real = batch.analyze_one

    def spy(path, settings):
        seen.append(path)
        return real(path, settings)

    monkeypatch.setattr(batch, "analyze_one", spy)
    return seen
