"""TensorBoard event files: the three scalar encodings, CRC failures, truncation, ranks, runs."""

from __future__ import annotations

import math
import shutil
import struct
from pathlib import Path

import pytest

from stabilitycli import ingest
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from stabilitycli.ingest.tensorboard import reader as tensorboard
from stabilitycli.ingest.tensorboard._tfrecord import RecordReader, masked_crc
from tests.ingest._synthetic_run import (
    assert_same_values,
    event_bytes,
    training_run,
    write_events,
    write_tensorboardx,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tensorboard"


def _column(run, name: str) -> list[float]:
    return run.frame[name].to_list()


def _record_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        (length,) = struct.unpack_from("<Q", data, pos)
        pos += 12 + length + 4
    return offsets


# --- the committed fixtures (written by tensorboardX), no writer package needed -----


def test_spike_fixture_reads_every_step_and_the_dtype_from_hparams():
    run = ingest.read(FIXTURES / "spike")
    expected = training_run(spike_at=30)
    assert run.source.format == "tensorboard"
    assert run.frame["step"].to_list() == list(range(60))
    assert_same_values(_column(run, "loss"), expected["train/loss"])
    assert_same_values(_column(run, "grad_norm"), expected["train/grad_norm"])
    assert_same_values(_column(run, "lr"), expected["train/lr"])
    assert run.frame["loss"][30] == 9.5
    assert (run.source.dtype, run.source.dtype_origin) == (
        "fp16",
        "TensorBoard hparams param 'precision'='fp16'",
    )
    assert run.source.rows_read == run.source.rows_used == 60 and run.source.rows_rejected == 0


def test_nan_fixture_keeps_nan_and_both_infinities_at_their_steps():
    run = ingest.read(FIXTURES / "nan")
    loss, grad = _column(run, "loss"), _column(run, "grad_norm")
    assert math.isnan(loss[40]) and math.isnan(grad[40])
    assert math.isinf(loss[41]) and loss[41] > 0
    assert math.isinf(grad[42]) and grad[42] < 0
    nonfinite = [s for s in range(60) if not math.isfinite(loss[s]) or not math.isfinite(grad[s])]
    assert nonfinite == [40, 41, 42]
    assert run.source.dtype is None  # nothing in this run says


def test_rank_folders_become_one_per_rank_run():
    run = ingest.read(FIXTURES, ReadOptions(run="ranks"))
    frame = run.frame
    assert run.source.ranks == 4
    assert sorted(frame["rank"].unique().to_list()) == [0, 1, 2, 3]
    rank2 = frame.filter(frame["rank"] == 2)
    assert math.isnan(rank2["loss"][20]) and math.isinf(rank2["loss"][21])
    rank0 = frame.filter(frame["rank"] == 0)
    assert all(math.isfinite(v) for v in rank0["loss"].to_list())
    assert_same_values(rank0["loss"].to_list(), training_run(spike_at=None, seed=0)["train/loss"])


def test_several_runs_without_a_choice_is_one_line_naming_them():
    with pytest.raises(StabInputError) as err:
        ingest.read(FIXTURES)
    message = str(err.value)
    assert "\n" not in message
    assert "--run" in message and "spike" in message and "tf2" in message


def test_empty_run_is_a_clear_input_error():
    with pytest.raises(StabInputError) as err:
        ingest.read(FIXTURES, ReadOptions(run="empty"))
    assert "no scalar summaries" in str(err.value) and "\n" not in str(err.value)


def test_zero_byte_event_file_is_an_input_error(tmp_path):
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")
    with pytest.raises(StabInputError, match="no scalar summaries"):
        ingest.read(tmp_path)


def test_detection_of_files_and_directories():
    event_file = next((FIXTURES / "spike").iterdir())
    assert ingest.detect_format(event_file) == "tensorboard"
    assert ingest.detect_format(FIXTURES / "ranks") == "tensorboard"
    assert not tensorboard.sniff(FIXTURES.parent / "mlflow" / "mlruns", b"")


# --- encodings ------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["simple", "float_val", "double_val", "tf2", "tf2_double"])
def test_every_scalar_encoding_reads_the_same_values(tmp_path, encoding):
    expected = training_run(spike_at=30, nonfinite_at=45)
    write_events(tmp_path / "events.out.tfevents.1700000000.host", expected, encoding)
    run = ingest.read(tmp_path)
    for key, column in (
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/lr", "lr"),
    ):
        assert_same_values(_column(run, column), expected[key])
    assert math.isinf(run.frame["loss"][46]) and run.frame["loss"][46] > 0
    assert math.isinf(run.frame["grad_norm"][47]) and run.frame["grad_norm"][47] < 0


def test_non_scalar_tensors_are_not_read_as_scalars(tmp_path):
    from stabilitycli.ingest.tensorboard import _proto as tbp
    from tests.ingest._synthetic_run import _frame

    event_cls = tbp.messages()["Event"]
    events = []
    for step in range(3):
        event = event_cls(step=step)
        scalar = event.summary.value.add(tag="loss", simple_value=float(step))
        histo = event.summary.value.add(tag="weights")  # a [3] float tensor: not a scalar
        histo.tensor.dtype = tbp.DT_FLOAT
        histo.tensor.tensor_shape.dim.add(size=3)
        histo.tensor.float_val[:] = [1.0, 2.0, 3.0]
        text = event.summary.value.add(tag="note")  # a string scalar: not a number
        text.tensor.dtype = tbp.DT_STRING
        text.tensor.string_val.append(b"hello")
        assert scalar.tag == "loss"
        events.append(_frame(event.SerializeToString()))
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"".join(events))
    run = ingest.read(tmp_path)
    assert run.frame.columns == ["step", "loss"]
    assert run.frame["loss"].to_list() == [0.0, 1.0, 2.0]
    assert any("6 non-scalar" in note for note in run.source.notes)


# --- damaged files ----------------------------------------------------------------------


def _copy_fixture(tmp_path: Path, run: str = "nan") -> Path:
    target = tmp_path / run
    shutil.copytree(FIXTURES / run, target)
    return next(target.iterdir())


def test_one_corrupt_byte_mid_file_skips_exactly_that_record(tmp_path):
    event_file = _copy_fixture(tmp_path)
    data = bytearray(event_file.read_bytes())
    offsets = _record_offsets(bytes(data))
    victim = len(offsets) // 2
    # flip a byte inside the float of a simple_value: without the data CRC this
    # record would parse fine and hand back a wrong number
    data[offsets[victim + 1] - 6] ^= 0x40
    event_file.write_bytes(bytes(data))
    run = ingest.read(event_file.parent)
    source = run.source
    assert source.rows_rejected == 1
    assert source.rejections[0].line == victim + 1
    assert f"byte offset {offsets[victim]}" in source.rejections[0].reason
    assert any("data CRC mismatch" in w and str(offsets[victim]) in w for w in source.warnings)
    # every other point is there: 3 keys x 60 steps minus the lost one
    total = sum(run.frame[c].is_not_null().sum() for c in ("loss", "grad_norm", "lr"))
    assert total == 3 * 60 - 1
    assert run.frame["step"].max() == 59  # records after the bad one were read
    assert math.isnan(run.frame["loss"][40]) and math.isinf(run.frame["loss"][41])


def test_corrupt_length_resynchronises_at_the_next_record(tmp_path):
    event_file = _copy_fixture(tmp_path)
    data = bytearray(event_file.read_bytes())
    offsets = _record_offsets(bytes(data))
    victim = 100
    data[offsets[victim] + 1] ^= 0xFF  # the length itself: cannot be trusted
    event_file.write_bytes(bytes(data))
    run = ingest.read(event_file.parent)
    assert run.source.rows_rejected == 1
    assert "length CRC mismatch" in run.source.rejections[0].reason
    skipped = offsets[victim + 1] - offsets[victim]
    assert f"skipped {skipped} bytes" in run.source.rejections[0].reason
    total = sum(run.frame[c].is_not_null().sum() for c in ("loss", "grad_norm", "lr"))
    assert total == 3 * 60 - 1


def test_record_cut_off_mid_write_keeps_everything_before_it(tmp_path):
    event_file = _copy_fixture(tmp_path)
    data = event_file.read_bytes()
    event_file.write_bytes(data[:-7])
    run = ingest.read(event_file.parent)
    assert any("cut off mid-write" in w for w in run.source.warnings)
    assert run.source.rows_rejected == 1
    total = sum(run.frame[c].is_not_null().sum() for c in ("loss", "grad_norm", "lr"))
    assert total == 3 * 60 - 1
    assert run.frame["lr"][59] is None  # the last point written (lr at step 59) was the cut one
    assert math.isnan(run.frame["loss"][40])


def test_intact_file_reports_no_problem():
    data = next((FIXTURES / "nan").iterdir()).read_bytes()
    reader = RecordReader(data)
    records = list(reader)
    assert reader.problems == []
    assert len(records) == len(_record_offsets(data))


def test_masked_crc_matches_what_tensorboardx_wrote():
    import google_crc32c

    assert google_crc32c.value(b"123456789") == 0xE3069283  # the published CRC-32C check value
    data = next((FIXTURES / "spike").iterdir()).read_bytes()
    (length,) = struct.unpack_from("<Q", data, 0)
    (stored_header_crc,) = struct.unpack_from("<I", data, 8)
    (stored_data_crc,) = struct.unpack_from("<I", data, 12 + length)
    assert masked_crc(data[:8]) == stored_header_crc
    assert masked_crc(data[12 : 12 + length]) == stored_data_crc


# --- runs made of several files ------------------------------------------------------------


def test_several_event_files_are_read_in_name_order_and_a_resume_is_a_restart(tmp_path):
    first = training_run(spike_at=None, steps=40)
    resumed = training_run(spike_at=None, steps=60, seed=1.0)
    resumed = {k: v[30:] for k, v in resumed.items()}  # resumed from the step-30 checkpoint
    write_events(tmp_path / "events.out.tfevents.1700000000.host", first, "simple")
    write_events(tmp_path / "events.out.tfevents.1700000500.host", resumed, "simple")
    run = ingest.read(tmp_path)
    assert run.frame["step"].to_list() == list(range(60))
    assert [(r.resumed_from_step, r.last_step_before) for r in run.source.restarts] == [(30, 39)]
    assert_same_values(run.frame["loss"].to_list()[30:], resumed["train/loss"])
    assert run.abandoned.height == 10  # steps 30..39 of the first attempt, kept aside


def test_run_flag_selects_one_folder_among_several(tmp_path):
    write_events(
        tmp_path / "baseline" / "events.out.tfevents.1.h", training_run(spike_at=None), "simple"
    )
    write_events(
        tmp_path / "lr-high" / "events.out.tfevents.1.h", training_run(spike_at=30), "simple"
    )
    with pytest.raises(StabInputError, match="baseline, lr-high"):
        ingest.read(tmp_path)
    run = ingest.read(tmp_path, ReadOptions(run="lr-high"))
    assert run.source.run == "lr-high" and run.frame["loss"][30] == 9.5


# --- the real writer ----------------------------------------------------------------------


def test_tensorboardx_writer_nan_and_inf_survive(tmp_path):
    pytest.importorskip(
        "tensorboardX", reason="tensorboardX not installed (pip install tensorboardX)"
    )
    expected = training_run(spike_at=30, nonfinite_at=45)
    write_tensorboardx(expected, tmp_path / "run")
    run = ingest.read(tmp_path / "run")
    for key, column in (
        ("train/loss", "loss"),
        ("train/grad_norm", "grad_norm"),
        ("train/lr", "lr"),
    ):
        assert_same_values(_column(run, column), expected[key])
    assert math.isnan(run.frame["loss"][45]) and run.frame["loss"][46] == math.inf
    assert run.frame["grad_norm"][47] == -math.inf


def test_event_bytes_helper_round_trips_through_the_reader():
    data = event_bytes(None)
    records = list(RecordReader(data))
    assert len(records) == 1


def test_rank_named_parent_folders_count_as_ranks(tmp_path):
    for rank in range(2):
        folder = tmp_path / f"worker-{rank}" / "tb"
        write_events(folder / "events.out.tfevents.1.h", training_run(seed=rank), "simple")
    run = ingest.read(tmp_path)
    assert run.source.ranks == 2 and sorted(run.frame["rank"].unique().to_list()) == [0, 1]


# --- the fast paths agree with the plain ones -------------------------------------------


def _plain_walk(data: bytes) -> tuple[list[tuple[int, int, int]], list[tuple[str, int, int]]]:
    """The reference: a record-by-record walk with the same rules.

    Returns (number, start, end) per record, and the problems."""
    from stabilitycli.ingest.tensorboard._tfrecord import _resync

    records, problems, pos, number = [], [], 0, 0
    while pos < len(data):
        number += 1
        if len(data) - pos < 12:
            problems.append(("truncated", number, pos))
            break
        length, length_crc = struct.unpack_from("<QI", data, pos)
        if masked_crc(data[pos : pos + 8]) != length_crc:
            problems.append(("length_crc", number, pos))
            pos = _resync(data, pos + 1)
            if pos is None:
                break
            continue
        end = pos + 12 + length
        if end + 4 > len(data):
            problems.append(("truncated", number, pos))
            break
        if masked_crc(data[pos + 12 : end]) != struct.unpack_from("<I", data, end)[0]:
            problems.append(("data_crc", number, pos))
        else:
            records.append((number, pos + 12, end))
        pos = end + 4
    return records, problems


def test_bulk_walk_finds_exactly_the_records_of_a_plain_walk_in_a_long_damaged_file():
    from stabilitycli.ingest.tensorboard._tfrecord import frame_records

    # 3 tags x 3000 steps: long repeating stretches (the bulk walk's case), the step
    # varint growing at 128, and damage in the middle of a repeating stretch
    data = bytearray(event_bytes(training_run(spike_at=None, steps=3000), "simple"))
    offsets = _record_offsets(bytes(data))
    data[offsets[2000] + 20] ^= 0x01  # a payload byte: data CRC
    data[offsets[5000] + 3] ^= 0xFF  # a length byte: header CRC, resync
    data[offsets[7000] + 9] ^= 0x10  # a header CRC byte
    data = bytes(data[:-5])  # the last record cut off
    framing = frame_records(data)
    records, problems = _plain_walk(data)
    assert len(records) == 3 * 3000 + 1 - 4
    assert (
        list(
            zip(
                framing.numbers.tolist(),
                framing.starts.tolist(),
                framing.ends.tolist(),
                strict=True,
            )
        )
        == records
    )
    assert [(p.kind, p.record, p.offset) for p in framing.problems] == problems
    assert [kind for kind, _, _ in problems] == [
        "data_crc",
        "length_crc",
        "length_crc",
        "truncated",
    ]


def test_an_irregular_file_walks_the_same_as_a_plain_walk():
    from stabilitycli.ingest.tensorboard._tfrecord import frame_records
    from tests.ingest._synthetic_run import _frame

    # an eval metric every 7th step and a long tag now and then break the pattern again and again
    payloads = []
    for step in range(1500):
        payloads += [_event(step, [("train/loss", 2.0)]), _event(step, [("train/lr", 1e-3)])]
        if step % 7 == 0:
            payloads.append(_event(step, [("eval/loss", 2.5)]))
        if step % 300 == 0:
            payloads.append(_event(step, [("a/much/longer/tag/name", 1.0), ("b", 2.0)]))
    data = b"".join(_frame(p) for p in payloads)
    framing = frame_records(data)
    records, problems = _plain_walk(data)
    assert len(records) == len(payloads)
    assert (
        list(
            zip(
                framing.numbers.tolist(),
                framing.starts.tolist(),
                framing.ends.tolist(),
                strict=True,
            )
        )
        == records
    )
    assert problems == [] and framing.problems == []


def _event(step: int, values: list[tuple[str, float]], wall_time: float = 1.7e9) -> bytes:
    from stabilitycli.ingest.tensorboard import _proto as tbp

    event = tbp.messages()["Event"](wall_time=wall_time, step=step)
    for tag, value in values:
        event.summary.value.add(tag=tag, simple_value=value)
    return event.SerializeToString()


def test_bulk_decoder_reads_what_protobuf_reads_and_leaves_it_the_rest():
    import numpy as np

    from stabilitycli.ingest.tensorboard import _proto as tbp

    event_cls = tbp.messages()["Event"]
    bad_utf8 = _event(5, [("lossX", 1.0)]).replace(b"lossX", b"loss\xff")
    payloads = [
        _event(0, [("loss", 1.5)]),  # step 0: proto3 writes no step field
        _event(127, [("loss", math.nan)]),
        _event(128, [("loss", math.inf)]),  # a two-byte step varint
        _event(2**35 - 1, [("loss", -math.inf)]),  # the longest step decoded in bulk
        _event(2**35, [("loss", -0.0)]),  # a six-byte varint: protobuf's
        _event(-3, [("loss", 2.0)]),  # a negative step is a ten-byte varint: protobuf's
        _event(9, [("", 3.0)]),  # an empty tag is not written at all: protobuf's
        _event(10, [("train/λ", 4.0)]),  # a non-ASCII tag
        _event(11, [("a", 1.0), ("b", 2.0)]),  # two values in one event: protobuf's
        _event(12, [("loss", 5.0)], wall_time=0.0),  # no wall_time field: protobuf's
        event_cls(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString(),
        bad_utf8,  # protobuf rejects a string that is not UTF-8; so must the bulk path
        _event(13, [("grad_norm", 6.0)]),
    ]
    data = b"".join(payloads)
    ends = np.cumsum([len(p) for p in payloads])
    starts = ends - [len(p) for p in payloads]
    decoded = tbp.decode_simple_scalars(data, starts, ends)
    assert decoded.index.tolist() == [0, 1, 2, 3, 7, 12]
    from google.protobuf.message import DecodeError

    with pytest.raises(DecodeError):
        event_cls.FromString(bad_utf8)
    for k, i in enumerate(decoded.index.tolist()):
        event = event_cls.FromString(payloads[i])
        (value,) = event.summary.value
        assert decoded.tags[decoded.codes[k]] == value.tag
        assert decoded.steps[k] == event.step
        got = decoded.values[k]
        assert (math.isnan(got) and math.isnan(value.simple_value)) or got == value.simple_value
        assert math.copysign(1, got) == math.copysign(1, value.simple_value)


def test_bulk_and_protobuf_points_keep_file_order(tmp_path):
    from stabilitycli.ingest.tensorboard import _proto as tbp
    from tests.ingest._synthetic_run import _frame

    # simple_value events (decoded in bulk) interleaved with tensor events (protobuf)
    event_cls = tbp.messages()["Event"]
    run = training_run(spike_at=30, nonfinite_at=45, steps=200)
    parts = []
    for step, (loss, lr) in enumerate(zip(run["train/loss"], run["train/lr"], strict=True)):
        parts.append(_frame(_event(step, [("train/loss", loss)])))
        event = event_cls(wall_time=1.7e9, step=step)
        item = event.summary.value.add(tag="train/lr")
        item.tensor.dtype, item.tensor.float_val[:] = tbp.DT_FLOAT, [lr]
        item.metadata.plugin_data.plugin_name = "scalars"
        parts.append(_frame(event.SerializeToString()))
    # the same point logged twice, once each way: the record written later wins
    relog = event_cls(wall_time=1.7e9, step=199)
    item = relog.summary.value.add(tag="train/loss")
    item.tensor.dtype, item.tensor.float_val[:] = tbp.DT_FLOAT, [7.0]
    item.metadata.plugin_data.plugin_name = "scalars"
    parts += [_frame(_event(199, [("train/lr", 0.5)])), _frame(relog.SerializeToString())]
    (tmp_path / "events.out.tfevents.1.h").write_bytes(b"".join(parts))
    read = ingest.read(tmp_path)
    assert read.frame["step"].to_list() == list(range(200))
    run["train/loss"][199], run["train/lr"][199] = 7.0, 0.5
    assert_same_values(_column(read, "loss"), run["train/loss"])
    assert_same_values(_column(read, "lr"), run["train/lr"])
    assert read.source.restarts == []
