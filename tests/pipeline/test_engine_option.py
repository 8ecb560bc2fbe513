"""`stab analyze --engine ray` (issue 13): the same JSON Lines and exit status as the local
engine from the command line; the Ray-only options refused with the local engine."""

from __future__ import annotations

import pytest

from tests.conftest import RUNS

LOGS = [RUNS / name / "run.jsonl" for name in ("spike-persistent", "healthy-every-10", "plateau")]


@pytest.mark.slow  # ~5 s: starts a local Ray instance
def test_the_ray_engine_prints_what_the_local_engine_prints(cli) -> None:
    pytest.importorskip("ray")
    local = cli("analyze", *LOGS, "--format", "json", "-j", "1")
    on_ray = cli("analyze", *LOGS, "--format", "json", "-j", "2", "--engine", "ray")
    assert on_ray.exit_code == local.exit_code == 1
    assert sorted(on_ray.stdout.splitlines()) == sorted(local.stdout.splitlines())
    assert len(on_ray.stdout.splitlines()) == len(LOGS)


@pytest.mark.parametrize("option", [("--time-limit", "5"), ("--ray-address", "auto")])
def test_ray_only_options_are_refused_with_the_local_engine(cli, option) -> None:
    result = cli("analyze", *LOGS, *option)
    assert result.exit_code == 2
    assert "--engine ray" in result.output
    assert len(result.output.strip().splitlines()) == 1
