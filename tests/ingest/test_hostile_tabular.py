"""Damaged and hostile tables (issue #12): a clear error or counted rejections, never a crash.

Every case reads in-process through `tabular.read` and checks the accounting
(rows read = used + rejected) and the exact values of the rows that survive.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tabular import tables as tabular

BIG = 2**63 - 1


def _read(path: Path, **options):
    return tabular.read(path, ReadOptions(**options))


def _accounted(run) -> None:
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten


def _values(run, column: str) -> dict[int, float]:
    frame = run.frame
    return dict(zip(frame["step"].to_list(), frame[column].to_list(), strict=True))


def _arrow_bytes(rows: int = 50) -> bytes:
    frame = pl.DataFrame({"step": np.arange(rows, dtype=np.int64), "loss": np.linspace(3, 1, rows)})
    buffer = io.BytesIO()
    frame.write_ipc(buffer)
    return buffer.getvalue()


def test_a_damaged_arrow_footer_is_an_input_error_never_a_panic(tmp_path: Path):
    # polars panics (a BaseException) on some of these; each must be read or refused cleanly
    data = _arrow_bytes()
    path = tmp_path / "damaged.arrow"
    refused = 0
    for at in range(len(data) - 250, len(data)):
        damaged = bytearray(data)
        damaged[at] = 0xFF
        path.write_bytes(bytes(damaged))
        try:
            run = _read(path)
        except StabInputError as err:
            assert str(path) in str(err)
            refused += 1
            continue
        _accounted(run)
    assert refused > 0


def test_a_damaged_arrow_footer_names_the_file_and_the_format(tmp_path: Path):
    data = bytearray(_arrow_bytes())
    for at in range(len(data) - 60, len(data) - 12):
        data[at] ^= 0xFF
    path = tmp_path / "footer.arrow"
    path.write_bytes(bytes(data))
    with pytest.raises(StabInputError, match=r"footer\.arrow: cannot read as Arrow IPC"):
        _read(path)


def test_damaged_parquet_is_an_input_error(tmp_path: Path):
    frame = pl.DataFrame({"step": np.arange(200), "loss": np.linspace(3, 1, 200)})
    good = tmp_path / "good.parquet"
    frame.write_parquet(good)
    data = bytearray(good.read_bytes())
    for at in range(len(data) // 2, len(data) // 2 + 40):
        data[at] ^= 0xFF
    path = tmp_path / "bad.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises(StabInputError, match=r"bad\.parquet: cannot read as parquet"):
        _read(path)


def test_steps_far_beyond_the_rest_are_warned_about(tmp_path: Path):
    # what a few damaged bytes in an Arrow data buffer read as: valid, and absurd
    steps = np.arange(200, dtype=np.int64)
    steps[5:13] = np.array([6510615555426900992 + k for k in range(8)], dtype=np.int64)
    path = tmp_path / "damaged_data.arrow"
    pl.DataFrame({"step": steps, "loss": np.linspace(3, 1, 200)}).write_ipc(path)
    run = _read(path)
    _accounted(run)
    assert any("far beyond the others" in w and "row 6" in w for w in run.source.warnings)


def test_a_step_column_going_back_and_forth_is_warned_about(tmp_path: Path):
    rng = np.random.default_rng(0)
    path = tmp_path / "shuffled.parquet"
    pl.DataFrame({"step": rng.permutation(100), "loss": np.ones(100)}).write_parquet(path)
    run = _read(path)
    assert any("goes back on" in w for w in run.source.warnings)


def test_negative_huge_steps_are_rejected_with_their_reason(tmp_path: Path):
    steps = np.arange(20, dtype=np.int64)
    steps[4] = -8_400_000_000_000_000_000
    path = tmp_path / "neg.arrow"
    loss = [float(i) for i in range(20)]
    loss[7], loss[8], loss[9] = math.nan, math.inf, -math.inf
    pl.DataFrame({"step": steps, "loss": loss}).write_ipc(path)
    run = _read(path)
    _accounted(run)
    assert run.source.rows_rejected == 1
    assert run.source.rejections[0].line == 5
    assert "negative step" in run.source.rejections[0].reason
    values = _values(run, "loss")
    assert 4 not in values and values[3] == 3.0
    assert math.isnan(values[7]) and values[8] == math.inf and values[9] == -math.inf


def test_int64_steps_near_the_top_of_the_range_stay_exact(tmp_path: Path):
    steps = [BIG - 600 + k * 100 for k in range(7)]  # crosses 2**63 - 512
    frame = pl.DataFrame({"step": pl.Series(steps, dtype=pl.Int64), "loss": [1.0] * 7})
    for name, write in (
        ("big.parquet", frame.write_parquet),
        ("big.arrow", frame.write_ipc),
        ("big.csv", frame.write_csv),
    ):
        path = tmp_path / name
        write(path)
        run = _read(path)
        _accounted(run)
        assert run.frame["step"].to_list() == steps, name
        assert run.source.rows_rejected == 0
    quoted = tmp_path / "quoted.csv"  # quotes take the line-by-line reader
    quoted.write_text("step,loss\n" + "".join(f'"{s}",1.0\n' for s in steps))
    assert _read(quoted).frame["step"].to_list() == steps


def test_a_fractional_step_is_rejected_not_truncated(tmp_path: Path):
    path = tmp_path / "frac.parquet"
    pl.DataFrame({"step": [59.0, 60.0, 60.5, 61.0], "loss": [1.0, 2.0, 3.0, 4.0]}).write_parquet(
        path
    )
    run = _read(path)
    _accounted(run)
    assert _values(run, "loss") == {59: 1.0, 60: 2.0, 61: 4.0}
    assert run.source.rejections[0].line == 3
    assert "not a whole number" in run.source.rejections[0].reason
    assert not run.source.restarts


@pytest.mark.parametrize(
    ("column", "dtype"),
    [
        (pa.array([[1], [2], [3]]), "List"),
        (pa.array([{"a": 1}, {"a": 2}, {"a": 3}]), "Struct"),
        (pa.array([b"1", b"2", b"3"]), "Binary"),
    ],
)
@pytest.mark.parametrize("role", ["step", "rank"])
def test_a_step_or_rank_column_that_is_not_numbers_is_named(
    tmp_path: Path, column, dtype: str, role: str
):
    columns = {"step": pa.array([1, 2, 3]), "loss": pa.array([1.0, 2.0, 3.0])}
    columns[role] = column
    path = tmp_path / f"{role}.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(StabInputError, match=rf"the {role} column '{role}' holds {dtype}"):
        _read(path)


def test_csv_cell_over_128_kib_is_read(tmp_path: Path):
    path = tmp_path / "wide.csv"
    note = "x" * 200_000
    path.write_text(f'step,loss,note\n1,2.5,a\n2,nan,"{note}"\n3,inf,b\n')
    run = _read(path)
    _accounted(run)
    values = _values(run, "loss")
    assert values[1] == 2.5 and math.isnan(values[2]) and values[3] == math.inf


@pytest.mark.parametrize("quoted", [False, True])
def test_csv_row_over_max_line_bytes_is_rejected_and_reading_goes_on(tmp_path: Path, quoted):
    path = tmp_path / "long.csv"
    cell = "y" * 5000
    cell = f'"{cell}"' if quoted else cell
    path.write_text(f"step,loss,note\n1,2.5,a\n2,2.4,{cell}\n3,-inf,b\n")
    run = _read(path, limits=InputLimits(max_line_bytes=1000))
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [3]
    assert "max_line_bytes" in run.source.rejections[0].reason or "field" in (
        run.source.rejections[0].reason
    )
    values = _values(run, "loss")
    assert values == {1: 2.5, 3: -math.inf}


def test_csv_duplicate_header_is_an_error_naming_the_column(tmp_path: Path):
    path = tmp_path / "dup.csv"
    path.write_text("step,loss,lr,loss\n1,2.0,0.1,3.0\n2,2.1,0.1,3.1\n")
    with pytest.raises(StabInputError, match=r"dup\.csv:1: the header names column 'loss' twice"):
        _read(path)


def test_csv_rows_with_too_many_or_too_few_fields_are_rejected_by_line(tmp_path: Path):
    path = tmp_path / "ragged.csv"
    path.write_text("step,loss\n1,2.5\n2\n3,nan\n4,2.2,9\n5,-inf\n")
    run = _read(path)
    _accounted(run)
    reasons = {r.line: r.reason for r in run.source.rejections}
    assert reasons == {
        3: "1 fields where the header has 2",
        5: "3 fields where the header has 2",
    }
    values = _values(run, "loss")
    assert set(values) == {1, 3, 5}
    assert values[1] == 2.5 and math.isnan(values[3]) and values[5] == -math.inf


def test_csv_non_utf8_and_nul_bytes_reject_their_row_only(tmp_path: Path):
    path = tmp_path / "bytes.csv"
    path.write_bytes(b"step,loss\n1,2.5\n2,2.4\xff\n3,2.3\x00\n4,inf\n5,2.1\n")
    run = _read(path)
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [3, 4]
    assert all("not a number" in r.reason for r in run.source.rejections)
    assert _values(run, "loss") == {1: 2.5, 4: math.inf, 5: 2.1}


def test_csv_non_utf8_bytes_in_a_text_column_keep_the_row(tmp_path: Path):
    path = tmp_path / "text.csv"
    path.write_bytes(b"step,loss,note\n1,2.5,ok\n2,2.4,caf\xe9\n3,2.3,x\x00y\n")
    run = _read(path)
    _accounted(run)
    assert run.source.rows_rejected == 0
    assert _values(run, "loss") == {1: 2.5, 2: 2.4, 3: 2.3}


def test_a_table_over_max_input_bytes_is_refused_with_the_setting(tmp_path: Path):
    path = tmp_path / "big.csv"
    path.write_text("step,loss\n" + "".join(f"{i},1.0\n" for i in range(1000)))
    with pytest.raises(StabInputError, match="max_input_bytes"):
        _read(path, limits=InputLimits(max_input_bytes=1000))


def test_a_wandb_export_without_its_step_column_is_an_input_error(tmp_path: Path):
    from stabilitycli.ingest.wandb import csv_export as wandb_csv

    path = tmp_path / "export.csv"
    path.write_text("step,run - loss\n1,2.0\n2,3.0\n")
    with pytest.raises(StabInputError, match="no `Step` column"):
        wandb_csv.read(path, ReadOptions())


@pytest.mark.parametrize("kind", ["arrow", "parquet"])
def test_a_compressed_table_inflating_past_max_input_bytes_stops_there(tmp_path: Path, kind):
    frame = pl.DataFrame({"step": np.arange(400_000), "loss": np.zeros(400_000)})
    path = tmp_path / f"bomb.{kind}"
    if kind == "arrow":
        frame.write_ipc(path, compression="zstd")
    else:
        frame.write_parquet(path, compression="zstd")
    limit = 1 << 20
    assert path.stat().st_size < limit  # small on disk: only inflating it reaches the limit
    with pytest.raises(StabInputError, match="max_input_bytes"):
        _read(path, limits=InputLimits(max_input_bytes=limit))


def test_a_csv_row_with_too_few_fields_is_rejected_not_filled_with_nulls(tmp_path: Path):
    path = tmp_path / "short.csv"
    path.write_text("step,loss,lr\n1,2.5,0.1\n2,2.4\n3,nan,0.1\n")
    run = _read(path)
    _accounted(run)
    assert [(r.line, r.reason) for r in run.source.rejections] == [
        (3, "2 fields where the header has 3")
    ]
    values = _values(run, "loss")
    assert set(values) == {1, 3} and values[1] == 2.5 and math.isnan(values[3])


def test_a_rank_that_is_no_process_index_is_rejected_with_its_reason(tmp_path: Path):
    # damaged Arrow bytes read as ranks like -738734374912: rejected, never a rank of the run
    path = tmp_path / "ranks.arrow"
    pl.DataFrame(
        {
            "step": [1, 1, 2, 2, 3],
            "rank": [0, 1, 0, -738_734_374_912, 2**40],
            "loss": [2.5, math.nan, math.inf, 2.0, 1.0],
        }
    ).write_ipc(path)
    run = _read(path)
    _accounted(run)
    assert [r.line for r in run.source.rejections] == [4, 5]
    assert all("no process index" in r.reason for r in run.source.rejections)
    assert run.frame["rank"].to_list() == [0, 0, 1]
    loss = run.frame["loss"].to_list()
    assert loss[0] == 2.5 and loss[1] == math.inf and math.isnan(loss[2])


def test_a_stray_carriage_return_in_the_header_is_an_input_error_or_read(tmp_path: Path):
    path = tmp_path / "cr.csv"
    path.write_bytes(b"\rjunk step,loss\n1,2.5\n2,2.4\n")
    try:
        run = _read(path)
    except StabInputError as err:
        assert "cr.csv" in str(err)
    else:
        _accounted(run)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_tables_own_row_column_is_kept_under_another_name(tmp_path: Path, kind):
    path = tmp_path / f"own_row.{kind}"
    frame = pl.DataFrame({"step": [1, 2, 3], "_row": [7, 8, 9], "loss": [2.5, math.nan, math.inf]})
    frame.write_csv(path) if kind == "csv" else frame.write_parquet(path)
    run = _read(path)
    _accounted(run)
    assert run.frame["_row (as logged)"].to_list() == [7.0, 8.0, 9.0]
    loss = run.frame["loss"].to_list()
    assert loss[0] == 2.5 and math.isnan(loss[1]) and loss[2] == math.inf


def test_a_header_carried_over_two_lines_by_an_open_quote_is_checked_too(tmp_path: Path):
    path = tmp_path / "open_quote.csv"
    path.write_text('"Step","loss","l\n"Step","loss","x"\n1,2.5,3\n')
    with pytest.raises(StabInputError, match="names column 'loss' twice"):
        _read(path)


@pytest.mark.parametrize("quoted", [False, True])
def test_a_csv_with_a_byte_order_mark_keeps_its_step_column(tmp_path: Path, quoted):
    path = tmp_path / "bom.csv"
    body = '"step","loss"\n1,2.5\n2,nan\n' if quoted else "step,loss\n1,2.5\n2,nan\n"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    run = _read(path)
    _accounted(run)
    assert run.frame.columns == ["step", "loss"]
    assert run.frame["step"].to_list() == [1, 2] and math.isnan(run.frame["loss"][1])


@pytest.mark.parametrize("damaged", ['11,"1.11', '11,1.11,"x'])
def test_an_unclosed_quote_rejects_its_line_and_the_rows_after_it_are_read(
    tmp_path: Path, damaged: str
):
    # the quote took every later line into one cell: 28 rows vanished uncounted
    rows = ["step,loss", *(f"{s},{1 + s / 100}" for s in range(40))]
    rows[12] = damaged
    path = tmp_path / "open_quote_row.csv"
    path.write_text("\n".join(rows) + "\n")
    run = _read(path)
    source = run.source
    assert (source.rows_read, source.rows_rejected) == (40, 1)
    assert source.rejections[0].line == 13
    assert "quote opened on this line is not closed" in source.rejections[0].reason
    steps = run.frame["step"].to_list()
    assert steps == [s for s in range(40) if s != 11]
    assert run.frame["loss"].to_list() == [1 + s / 100 for s in steps]


def test_two_unnamed_columns_are_two_columns(tmp_path: Path):
    # two empty header cells were one dict key: a polars ComputeError on the whole file
    path = tmp_path / "unnamed.csv"
    # numbers in both (each gets a cast) and a quote (the line-by-line reader)
    path.write_text("step,,loss,\n" + "".join(f'{s},5,{1 + s / 10},"7"\n' for s in range(6)))
    run = _read(path)
    assert run.frame["loss"].to_list() == [1 + s / 10 for s in range(6)]
    assert run.source.rows_read == 6 and run.source.rows_rejected == 0
