"""Per-rank logs: a directory of per-rank JSONL files, and one JSONL file with a rank field."""

from __future__ import annotations

import gzip
import math

import numpy as np
import polars as pl
import pytest

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.ingest import detect_format, read
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.rank_dir import default_rank
from tests.conftest import FIXTURES

RANKS = FIXTURES / "ranks"


def write(path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)


@pytest.mark.parametrize(
    "rel, rank",
    [
        ("rank_7.jsonl", 7),
        ("rank7.jsonl", 7),
        ("rank-007.jsonl.gz", 7),
        ("worker_7.jsonl", 7),
        ("log.rank7.jsonl", 7),
        ("metrics_rank_12.ndjson", 12),
        ("node1-rank07.jsonl.zst", 7),
        ("rank_7/metrics.jsonl", 7),
        ("worker-3/log.jsonl.gz", 3),
        ("metrics.jsonl", None),
        ("global.jsonl", None),
        ("cranky7.jsonl", None),
        ("node0_gpu3.jsonl", None),
    ],
)
def test_recognised_file_names(tmp_path, rel, rank):
    path = tmp_path / rel
    assert default_rank(path, tmp_path) == rank


def test_mixed_name_styles_read_as_one_run():
    run = read(RANKS / "mixed_names")
    src = run.source
    assert detect_format(RANKS / "mixed_names") == "rank_dir" and src.format == "rank_dir"
    assert sorted(run.frame["rank"].unique().to_list()) == list(range(8))
    # 8 files x 100 lines, plus rank 0's last line cut off mid-write
    assert (src.rows_read, src.rows_used, src.rows_rejected) == (801, 800, 1)
    assert src.rejections[0].line == 101 and src.rejections[0].reason.startswith(
        "rank_0.jsonl: last line cut off"
    )
    assert any("global.jsonl" in w and "not read" in w for w in src.warnings)
    # ranks log at their own offsets: rank k at steps 10*i + k, all kept
    steps = run.frame.group_by("rank").agg(pl.col("step").min()).sort("rank")["step"].to_list()
    assert steps == list(range(8))
    assert run.frame.group_by("rank").len()["len"].to_list() == [100] * 8


def test_nan_and_infinities_survive_exactly(tmp_path):
    write(tmp_path / "rank_0.jsonl", ['{"step": 1, "loss": NaN}', '{"step": 2, "loss": 2.5}'])
    write(
        tmp_path / "rank_1.jsonl.gz",
        ['{"step": 1, "loss": Infinity}', '{"step": 2, "loss": -Infinity}'],
    )
    write(tmp_path / "rank_2.jsonl", ['{"step": 1, "loss": "nan"}', '{"step": 2, "loss": 1e308}'])
    frame = read(tmp_path).frame.sort("rank", "step")
    values = frame["loss"].to_list()
    assert math.isnan(values[0]) and values[1] == 2.5
    assert values[2] == math.inf and values[3] == -math.inf
    assert math.isnan(values[4]) and values[5] == 1e308


def test_bad_lines_are_named_by_file_and_line(tmp_path):
    write(tmp_path / "rank_0.jsonl", ['{"step": 1, "loss": 2.0}', '{"step": 2, "loss": 1.9}'])
    write(
        tmp_path / "rank_1.jsonl",
        ['{"step": 1, "loss": 2.1}', '{"step": 2, "loss": ', '{"step": 3, "loss": 1.8}'],
    )
    write(
        tmp_path / "rank_2" / "metrics.jsonl",
        ['{"step": 1, "loss": 2.2}', '{"step": 2, "note": "eval"}'],
    )
    run = read(tmp_path)
    src = run.source
    assert (src.rows_read, src.rows_used, src.rows_rejected) == (7, 5, 2)
    named = {(r.line, r.reason.split(":")[0]) for r in src.rejections}
    assert named == {(2, "rank_1.jsonl"), (2, "rank_2/metrics.jsonl")}
    assert sum(src.rejection_counts.values()) == 2


def test_rank_pattern_overrides_the_names():
    with pytest.raises(StabInputError, match="--rank-pattern"):
        read(RANKS / "custom_names")  # numbered but not recognised: sniffed, then explained
    run = read(RANKS / "custom_names", ReadOptions(rank_pattern=r"gpu(\d+)"))
    assert sorted(run.frame["rank"].unique().to_list()) == [0, 1, 2, 3]
    assert run.source.ranks == 4
    with pytest.raises(StabInputError, match="matched no file"):
        read(RANKS / "custom_names", ReadOptions(rank_pattern=r"rank(\d+)"))


@pytest.mark.parametrize(
    "pattern, needle",
    [("gpu(\\d+", "not a valid regular expression"), ("gpu\\d+", "capture group")],
)
def test_bad_rank_pattern_is_a_usage_error(pattern, needle):
    with pytest.raises(StabUsageError, match=needle):
        read(RANKS / "custom_names", ReadOptions(rank_pattern=pattern))


def test_rank_field_that_disagrees_with_the_name_is_said(tmp_path):
    write(tmp_path / "rank_3.jsonl", ['{"step": 1, "rank": 5, "loss": 2.0}'])
    write(tmp_path / "rank_4.jsonl", ['{"step": 1, "rank": 4, "loss": 2.0}'])
    run = read(tmp_path)
    assert sorted(run.frame["rank"].to_list()) == [3, 4]
    assert [w for w in run.source.warnings if "rank" in w and "name says 3" in w]
    assert not [w for w in run.source.warnings if "name says 4" in w]


def test_two_files_for_one_rank_and_empty_files(tmp_path):
    write(tmp_path / "rank_1.jsonl", ['{"step": 1, "loss": 2.0}'])
    write(tmp_path / "rank-001.jsonl.gz", ['{"step": 2, "loss": 1.9}'])
    write(tmp_path / "rank_2.jsonl", [])
    run = read(tmp_path)
    assert run.frame.height == 2 and run.frame["rank"].to_list() == [1, 1]
    assert any("rank 1 comes from 2 files" in w for w in run.source.warnings)
    assert any("hold no rows" in w and "rank_2.jsonl" in w for w in run.source.warnings)


def test_all_empty_is_bad_input(tmp_path):
    write(tmp_path / "rank_0.jsonl", [])
    write(tmp_path / "rank_1.jsonl", [])
    with pytest.raises(StabInputError, match="every per-rank file is empty"):
        read(tmp_path)


def test_a_resume_inside_one_rank_file_is_a_restart_of_that_rank(tmp_path):
    write(tmp_path / "rank_0.jsonl", [f'{{"step": {s}, "loss": 2.0}}' for s in (1, 2, 3, 4)])
    write(
        tmp_path / "rank_1.jsonl",
        [f'{{"step": {s}, "loss": 2.0}}' for s in (1, 2, 3, 4, 2, 3, 4, 5)],
    )
    run = read(tmp_path)
    (restart,) = run.source.restarts
    assert (restart.rank, restart.at_row, restart.resumed_from_step, restart.last_step_before) == (
        1,
        5,
        2,
        4,
    )
    assert run.frame.filter(pl.col("rank") == 1)["step"].to_list() == [1, 2, 3, 4, 5]


def test_a_folder_without_per_rank_files_is_not_a_rank_dir(tmp_path):
    write(tmp_path / "metrics.jsonl", ['{"step": 1, "loss": 2.0}'])
    from stabilitycli.ingest import rank_dir

    assert not rank_dir.sniff(tmp_path, b"")
    assert not rank_dir.sniff(tmp_path / "metrics.jsonl", b"{")


def test_one_jsonl_file_with_a_rank_field_is_read_by_the_jsonl_reader():
    run = read(RANKS / "healthy_64.jsonl.gz")
    assert run.source.format == "jsonl" and run.source.ranks == 64
    assert run.has_ranks and run.frame.height == 64 * 250
    assert set(run.frame.columns) == {"step", "rank", "loss", "tokens_per_s"}


@pytest.mark.parametrize("key", ["rank", "global_rank", "dp_rank"])
def test_rank_keys_of_one_jsonl_file(tmp_path, key):
    lines = [
        f'{{"step": {s}, "{key}": {r}, "loss": {2.0 + r / 10}}}' for s in range(3) for r in range(4)
    ]
    lines.append(f'{{"step": 3, "{key}": 2, "loss": NaN}}')
    write(tmp_path / "all_ranks.jsonl", lines)
    run = read(tmp_path / "all_ranks.jsonl")
    assert run.source.ranks == 4
    nan_row = run.frame.filter((pl.col("rank") == 2) & (pl.col("step") == 3))
    assert np.isnan(nan_row["loss"][0])


def test_numbered_files_alike_are_sniffed_unlike_ones_are_not(tmp_path):
    from stabilitycli.ingest import rank_dir

    write(tmp_path / "alike" / "node0_gpu0.jsonl", ['{"step": 1, "loss": 2.0}'])
    write(tmp_path / "alike" / "node0_gpu1.jsonl", ['{"step": 1, "loss": 2.0}'])
    write(tmp_path / "unlike" / "run1.jsonl", ['{"step": 1, "loss": 2.0}'])
    write(tmp_path / "unlike" / "eval_2024.jsonl", ['{"step": 1, "loss": 2.0}'])
    assert rank_dir.sniff(tmp_path / "alike", b"")
    assert not rank_dir.sniff(tmp_path / "unlike", b"")
