"""`stab analyze` names in its verdict the rank and the onset `stab ranks` gives (#34)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES

RANK_FIXTURES = sorted(p for p in (FIXTURES / "ranks").iterdir() if not p.name.endswith(".md"))
# how each kind of rank event names the run
VERDICT_OF = {"level": "rank-outlier", "nonfinite": "nan", "silent": "rank-silent"}


@pytest.mark.parametrize("path", RANK_FIXTURES, ids=lambda p: p.name)
def test_analyze_and_ranks_agree_on_rank_and_onset(cli, path) -> None:
    ranks = cli("ranks", "--run", path, "--format", "json")
    if ranks.exit_code == 2:  # a folder of files named its own way: both refuse it alike
        assert cli("analyze", path, "--format", "json").exit_code == 2
        return
    analysis = json.loads(cli("analyze", path, "--format", "json").stdout)
    outliers = json.loads(ranks.stdout)["outliers"]
    named = [o for o in outliers if o["kind"] in VERDICT_OF]
    verdict = analysis["verdict"]
    if not named:
        assert verdict["code"] not in ("rank-outlier", "rank-silent")
        return
    first = min(named, key=lambda o: (o["severity"] != "error", o["onset_step"]))
    assert verdict["code"] == VERDICT_OF[first["kind"]], verdict["summary"]
    assert f"ank {first['rank']}" in verdict["summary"]
    assert f"step {first['onset_step']}" in verdict["summary"] or (
        first["kind"] == "silent" and f"after step {first['onset_step'] - 1}" in verdict["summary"]
    )
    # every rank finding of analyze is the one `stab ranks` reports, at the same step
    found = {(f["rank"], f["step"]) for f in analysis["findings"] if f["code"].startswith("rank-")}
    assert found == {(o["rank"], o["onset_step"]) for o in named}
