"""Crashes of issue 33 fixed at their cause: each input below once ended as a reader's
exception dressed as an input error; now it reads, or says what is wrong in words."""

from __future__ import annotations

import shutil
import sqlite3

from stabilitycli.ingest import read
from tests.conftest import FIXTURES


def test_a_lone_surrogate_key_in_trainer_state_rejects_only_its_entry(tmp_path) -> None:
    text = (FIXTURES / "hf_trainer" / "trainer_state.json").read_text()
    path = tmp_path / "trainer_state.json"
    path.write_text(text.replace('"loss"', '"\\ud800"', 1))
    run = read(path)
    reasons = [r.reason for r in run.source.rejections]
    assert "a lone surrogate in the key '\\ud800' (not valid Unicode)" in reasons
    clean = read(FIXTURES / "hf_trainer" / "trainer_state.json")
    assert run.source.rows_read == clean.source.rows_read


def test_a_damaged_table_name_in_an_mlflow_store_does_not_hide_the_runs(tmp_path) -> None:
    path = tmp_path / "mlflow.db"
    shutil.copy(FIXTURES / "mlflow" / "mlflow.db", path)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE zqzqzq (a)")
    conn.close()
    data = path.read_bytes()
    path.write_bytes(data.replace(b"zqzqzq", b"\xff\xfeq\xff\xfeq"))
    expected = read(FIXTURES / "mlflow" / "mlflow.db", _run("spike"))
    got = read(path, _run("spike"))
    assert got.source.format == "mlflow_db"
    assert got.frame.height == expected.frame.height


def _run(name: str):
    from stabilitycli.ingest.options import ReadOptions

    return ReadOptions(run=name)


def test_an_empty_json_key_in_a_per_rank_log_reads(tmp_path) -> None:
    # found by a seeded generator: ranks out of order, so the rows are sorted by rank,
    # and a value under the key "" (a column named "")
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"step": 11, "loss": 0.08, "rank": 5, "epoch": {"": 1}}\n'
        '{"step": 23, "loss": 0.04, "": 0}\n'
        '{"step": 28, "loss": 0.03, "iteration": NaN, "epoch": NaN, "lr": 1.5}\n'
        '{"step": 31, "loss": 0.03, "rank": 1.5}\n'
    )
    run = read(path)
    assert run.source.rows_read == 4
    assert run.source.rows_read == (
        run.source.rows_used + run.source.rows_rejected + run.source.rows_rewritten
    )


def test_an_infinite_step_in_a_lightning_version_rejects_its_row(tmp_path) -> None:
    # two versions: the step ranges of each are compared to tell a resume, and `-inf`
    # was turned into an int there (OverflowError on the whole folder)
    for number, rows in enumerate(("0,1.0\n1,0.5\n-inf,0.3\n", "2,0.4\n3,0.2\n")):
        folder = tmp_path / "lightning_logs" / f"version_{number}"
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_text("step,train/loss_step\n" + rows)
    run = read(tmp_path / "lightning_logs")
    assert run.source.rows_read == 5
    assert run.source.rows_rejected == 1


def test_a_file_of_one_line_that_is_not_json_is_not_called_empty(tmp_path) -> None:
    import pytest

    from stabilitycli.core.errors import StabInputError

    path = tmp_path / "run.jsonl"
    path.write_bytes(b"garbage")  # no newline: read as a line cut off mid-write
    with pytest.raises(StabInputError) as err:
        read(path)
    assert "empty" not in str(err.value)
    assert str(err.value) == (
        f"{path}:1: no JSON object could be read: its one line is not JSON and ends "
        "without a newline"
    )


def test_an_mlflow_run_whose_points_are_all_unusable_says_so(tmp_path) -> None:
    import pytest

    from stabilitycli.core.errors import StabInputError

    path = tmp_path / "mlflow.db"
    shutil.copy(FIXTURES / "mlflow" / "mlflow.db", path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE metrics SET step = 0.5 WHERE run_uuid = "
            "(SELECT run_uuid FROM runs WHERE name = 'spike')"
        )
        logged = conn.execute(
            "SELECT COUNT(*) FROM metrics WHERE run_uuid = "
            "(SELECT run_uuid FROM runs WHERE name = 'spike')"
        ).fetchone()[0]
    conn.close()
    with pytest.raises(StabInputError) as err:
        read(path, _run("spike"))
    said = str(err.value)
    assert "has no metrics logged" not in said
    assert f"none of its {logged:,} logged metric points is usable" in said
    assert "not a 64-bit integer (real 0.5)" in said


def test_a_step_that_is_no_whole_number_is_rejected_not_truncated(tmp_path) -> None:
    # short logs take the per-line path, long ones the vectorised one: both checked
    for count in (5, 400):
        path = tmp_path / f"train_{count}.log"
        lines = [f"step {i}/{count} loss: {1.0 / i:.4f}" for i in range(1, count + 1)]
        lines[2] = f"step 2.5/{count} loss: 0.9000"
        path.write_text("\n".join(lines) + "\n")
        run = read(path)
        assert [(r.line, r.reason) for r in run.source.rejections] == [
            (3, "metric record without a usable step")
        ], count
        assert run.source.format == "kvlog"
        assert run.frame["step"].to_list().count(2) == 1  # 2.5 was never read as step 2


def test_many_steps_that_are_no_whole_number_are_rejected_in_the_vectorised_path(tmp_path):
    # a shape seen on many lines (`step #.#/# loss: #.#`) is read by one polars pass
    path = tmp_path / "train.log"
    lines = [f"step {i}{'.5' if i % 2 else ''}/400 loss: {1.0 / i:.4f}" for i in range(1, 401)]
    path.write_text("\n".join(lines) + "\n")
    run = read(path)
    assert run.source.rows_rejected == 200
    assert sorted(set(run.frame["step"].to_list())) == list(range(2, 401, 2))


def test_a_lightning_version_whose_every_row_is_rejected_is_an_input_error(tmp_path):
    # found by a seeded generator: its frame is empty, and numbering the rows after it
    # was int(None), an internal error on the whole folder
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text(
        "epoch,train/loss_step,val_loss,step\nx,1.0,1.0,0\n1,x,0.5,1\n"
    )
    import pytest

    from stabilitycli.core.errors import StabInputError

    with pytest.raises(StabInputError) as err:
        read(tmp_path / "lightning_logs")
    assert "version_0/metrics.csv" in str(err.value)
