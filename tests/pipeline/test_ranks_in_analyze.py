"""`stab analyze` on per-rank input runs the rank check first and stops blaming the mean."""

from __future__ import annotations

from stabilitycli import analyze
from tests.conftest import FIXTURES

RANKS = FIXTURES / "ranks"


def test_seed_story_is_rank_41_not_a_loss_problem() -> None:
    result = analyze(RANKS / "seed_64")
    assert result.verdict.code == "rank-outlier"
    assert "rank 41" in result.verdict.summary.lower()
    outlier = next(f for f in result.findings if f.code == "rank-outlier")
    assert outlier.rank == 41 and outlier.step == 1200
    # the mean's jump at the onset is the rank's doing, not an optimisation problem
    for f in result.findings:
        if f.code in ("spike", "divergence", "plateau"):
            assert f.evidence.get("explained_by_ranks") == [41]
    assert result.rank_report is not None
    assert abs(result.rank_report.to_dict()["outliers"][0]["mean_shift"] - 0.59) < 0.02


def test_healthy_64_ranks_are_healthy() -> None:
    result = analyze(RANKS / "healthy_64.jsonl.gz")
    assert result.verdict.code == "healthy"
    assert not [f for f in result.findings if f.code.startswith("rank")]


def test_nan_on_one_rank_names_the_rank() -> None:
    result = analyze(RANKS / "nan_rank.jsonl.gz")
    assert result.verdict.code == "nan"
    assert "rank 5" in result.verdict.summary.lower()


def test_json_carries_the_rank_report(cli) -> None:
    import json

    doc = json.loads(cli("analyze", RANKS / "seed_64", "--format", "json").stdout)
    assert doc["verdict"]["code"] == "rank-outlier"
    assert doc["ranks"]["schema"] == "stab.ranks/1"
    assert doc["source"]["ranks"] == 64
