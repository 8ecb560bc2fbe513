"""JSON-shaped readers on broken and hostile input (issue #12): bad bytes, deep nesting,
giant lines, axes of the wrong type, decompression bombs.

Each case damages one record of an otherwise good log and checks that exactly
that record is rejected, named, and counted, and that every other value
(NaN and +/-Inf included) is read back exactly.
"""

from __future__ import annotations

import gzip
import json
import math
import tracemalloc

import pytest

from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest import bounded, read
from stabilitycli.ingest.jsonl import reader as jsonl
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions

SPECIAL = [1.5, math.nan, math.inf, -math.inf]


def loss_at(step: int) -> float:
    return SPECIAL[step % 4] if step % 5 == 0 else 2.0 + step / 1000


def good_lines(n: int = 60) -> list[bytes]:
    return [json.dumps({"step": s, "loss": loss_at(s)}).encode() for s in range(n)]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def check_exact(run, damaged: set[int], n: int = 60) -> None:
    """Every step but the damaged ones, with its exact value; the accounting holds."""
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected + src.rows_rewritten
    steps = run.frame["step"].to_list()
    assert steps == [s for s in range(n) if s not in damaged]
    for step, value in zip(steps, run.frame["loss"].to_list(), strict=True):
        assert same(value, loss_at(step)), (step, value)


DEEP = b"[" * 100_000 + b"]" * 100_000

JSONL_CASES = {
    "non-UTF-8 byte": (b'{"step": 10, "loss": 2.0\xff5}', "not UTF-8"),
    "NUL in a key": (b'{"step": 10, "lo\x00ss": 2.0}', "control character"),
    "NUL after the object": (b'{"step": 10, "loss": 2.0}\x00', "not valid JSON"),
    "lone surrogate key": (b'{"step": 10, "loss": 2.0, "k\\udfff": 1}', "surrogate"),
    "surrogate as raw bytes": (b'{"step": 10, "loss": 2.0, "k\xed\xa0\x80": 1}', "surrogate"),
    "100k-deep list": (b'{"step": 10, "a": ' + DEEP + b"}", "max_json_depth"),
    "100k-deep object": (
        b'{"step": 10, "a": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,
        "max_json_depth",
    ),
    "deep past the limit only": (
        b'{"step": 10, "loss": 2.0, "a": ' + b"[" * 65 + b"]" * 65 + b"}",
        "max_json_depth",
    ),
    "step a list": (b'{"step": [10], "loss": 2.0}', "list"),
    "step an object": (b'{"step": {"n": 10}, "loss": 2.0}', "object"),
    "step a string": (b'{"step": "ten", "loss": 2.0}', "step"),
    "step a bool": (b'{"step": true, "loss": 2.0}', "bool"),
}


@pytest.mark.parametrize("nonfinite", [True, False], ids=["pyarrow-path", "polars-path"])
@pytest.mark.parametrize("case", list(JSONL_CASES))
def test_jsonl_damaged_line_is_rejected_and_the_rest_read_exactly(tmp_path, case, nonfinite):
    bad, reason = JSONL_CASES[case]
    lines = good_lines()
    if not nonfinite:  # no NaN/Infinity token: the polars reader is tried first
        lines = [json.dumps({"step": s, "loss": 2.0 + s / 1000}).encode() for s in range(60)]
    lines[10] = bad
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path)
    src = run.source
    assert src.rows_rejected == 1, src.rejections
    assert src.rejections[0].line == 11
    assert reason in src.rejections[0].reason
    if nonfinite:
        check_exact(run, {10})
    else:
        assert run.frame["step"].to_list() == [s for s in range(60) if s != 10]
        assert src.rows_read == src.rows_used + src.rows_rejected


@pytest.mark.parametrize("nonfinite", [True, False], ids=["pyarrow-path", "polars-path"])
def test_jsonl_lone_surrogate_in_a_text_value_drops_only_that_text(tmp_path, nonfinite) -> None:
    lines = good_lines() if nonfinite else [b'{"step": %d, "loss": 2.5}' % s for s in range(60)]
    lines[10] = b'{"step": 10, "loss": %s, "note": "\\ud800"}' % (b"NaN" if nonfinite else b"2.5")
    if nonfinite:
        lines[11] = b"not json"  # the pyarrow reader refuses a lone surrogate: the slow pass
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path)
    assert 10 in run.frame["step"].to_list()
    assert run.source.rows_read == run.source.rows_used + run.source.rows_rejected
    assert run.source.rows_rejected == (1 if nonfinite else 0)


def test_jsonl_rank_of_the_wrong_type_rejects_its_line(tmp_path) -> None:
    lines = [
        json.dumps({"step": s // 2, "rank": s % 2, "loss": 2.0 + s}).encode() for s in range(20)
    ]
    lines[7] = b'{"step": 3, "rank": [1], "loss": 9.0}'
    path = tmp_path / "ranks.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path)
    src = run.source
    assert src.rows_rejected == 1 and src.rejections[0].line == 8
    assert "'rank' is a JSON list" in src.rejections[0].reason
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert run.frame.height == 19


def test_jsonl_line_over_max_line_bytes_is_rejected(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STAB_LIMIT_MAX_LINE_BYTES", "4096")
    lines = good_lines()
    lines[30] = json.dumps({"step": 30, "loss": 1.0, "blob": "x" * 10_000}).encode()
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path)
    assert run.source.rows_rejected == 1 and run.source.rejections[0].line == 31
    assert "max_line_bytes" in run.source.rejections[0].reason
    check_exact(run, {30})


def test_jsonl_deep_last_line_without_newline_is_not_called_cut_off(tmp_path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join([*good_lines(), b'{"step": 60, "a": ' + DEEP + b"}"]))
    run = read(path)
    assert run.source.rejections[0].line == 61
    assert "max_json_depth" in run.source.rejections[0].reason
    assert not any("cut off" in w for w in run.source.warnings)
    check_exact(run, set())


def test_jsonl_many_kinds_of_damage_at_once(tmp_path) -> None:
    lines = good_lines()
    damaged = {3: b"\xff\xfe", 9: DEEP, 20: b'{"step": [1]}', 41: b'{"step": 41, "loss": 1.'}
    for step, text in damaged.items():
        lines[step] = text
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path)
    assert run.source.rows_rejected == 4
    assert [r.line for r in run.source.rejections] == [10, 4, 21, 42]
    check_exact(run, set(damaged))


def faults_line_by_line(data: bytes, limits: InputLimits) -> dict[int, str]:
    """What the screen must find: each line judged on its own, by number."""
    return {
        n: fault
        for n, line in enumerate(data.split(b"\n"), start=1)
        if (fault := bounded.line_fault(line, limits)) is not None
    }


def test_screen_matches_a_line_by_line_scan_across_window_edges(monkeypatch) -> None:
    import random

    rng = random.Random(12)
    limits = InputLimits(max_json_depth=3, max_line_bytes=30)
    for window in (7, 16, 33):
        monkeypatch.setattr(bounded, "_WINDOW", window)
        for _ in range(200):
            data = bytes(rng.choice(b'{[]}"\\ax\n') for _ in range(rng.randint(0, 200)))
            expected = faults_line_by_line(data, limits)
            screened = bounded.screen_lines(data, limits)
            assert screened.bad == expected
            kept = screened.blanked(data).split(b"\n")
            for n, line in enumerate(data.split(b"\n"), start=1):
                assert kept[n - 1] == (b"" if n in expected else line)


def test_screen_of_a_mostly_flat_log_finds_every_deep_line_and_counts_newlines(
    monkeypatch,
) -> None:
    """Flat lines let the screen bound a window's nesting by two counts; a deep line among
    them must still lift the bound and be found, wherever it falls."""
    import random

    rng = random.Random(26)
    limits = InputLimits(max_json_depth=3, max_line_bytes=60)
    for window in (16, 50, 1 << 20):
        monkeypatch.setattr(bounded, "_WINDOW", window)
        for _ in range(150):
            lines = []
            for n in range(rng.randint(0, 40)):
                depth = rng.choice([0] * 12 + [1, 2, 3, 4, 6])
                head = rng.choice([b"", b" ", b"x"])  # a line need not open with `{`
                lines.append(head + b'{"s":%d,"a":' % n + b"[" * depth + b"1" + b"]" * depth + b"}")
            data = b"\n".join(lines) + rng.choice([b"", b"\n"])
            screened = bounded.screen_lines(data, limits)
            assert screened.bad == faults_line_by_line(data, limits)
            assert screened.newlines == data.count(b"\n")


def test_screen_by_counts_over_the_buffer_agrees_line_by_line(monkeypatch) -> None:
    """A buffer no longer than a line may be is screened from counts over it all
    (`_flat_screen`): a line deeper than the limit must still be found, wherever it falls
    against the windows, and the newlines and `:` counted as the buffer holds them."""
    import random

    rng = random.Random(40)
    limits = InputLimits(max_json_depth=3, max_line_bytes=1 << 20)
    by_counts = 0
    for window in (7, 16, 1 << 20):
        monkeypatch.setattr(bounded, "_WINDOW", window)
        for _ in range(300):
            lines = []
            for n in range(rng.randint(0, 30)):
                depth = rng.choice([0] * 20 + [1, 2, 3, 4])
                head = rng.choice([b""] * 6 + [b" ", b"x", b"{"])
                lines.append(head + b'{"s":%d,"a":' % n + b"[" * depth + b"1" + b"]" * depth + b"}")
            data = b"\n".join(lines) + rng.choice([b"", b"\n"])
            screened = bounded.screen_lines(data, limits)
            assert screened.bad == faults_line_by_line(data, limits)
            assert screened.newlines == data.count(b"\n")
            if screened.colons is not None:
                by_counts += 1
                assert screened.colons == data.count(b":")
    assert by_counts > 100  # the counts decided most buffers


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"{}", 1),
        (b'{"a": [1, [2]]}', 3),
        (b'{"a": "[[[["}', 1),  # brackets in a string do not nest
        (b'{"a": "x\\\\", "b": [[1]]}', 3),  # an escaped backslash ends the string
        (b'{"a": "x\\"[[["}', 1),  # an escaped quote does not
        (b"[" * 100_000, 100_000),
    ],
)
def test_json_depth_without_recursion(text, depth) -> None:
    assert bounded.json_depth(text) == depth


# --- decompression ---------------------------------------------------------------------


def _gzip_bomb() -> bytes:
    """About 1 MB of gzip inflating to 1 GiB: one 10 MiB member of zeros, 100 times over."""
    return gzip.compress(b"\0" * (10 << 20), compresslevel=9) * 100


def _zstd_bomb() -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor(level=19).compress(b"\0" * (10 << 20)) * 100


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_decompression_bomb_stops_at_the_limit(tmp_path, monkeypatch, kind) -> None:
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", str(10 << 20))
    path = tmp_path / f"bomb.jsonl.{'gz' if kind == 'gzip' else 'zst'}"
    path.write_bytes(_gzip_bomb() if kind == "gzip" else _zstd_bomb())
    tracemalloc.start()
    try:
        with pytest.raises(StabInputError) as err:
            read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "max_input_bytes" in str(err.value) or "max_decompression_ratio" in str(err.value)
    assert kind in str(err.value)
    assert peak < 64 << 20  # the bound plus a feed, never the 1 GiB it would inflate to


def test_decompression_ratio_bounds_a_small_file(tmp_path) -> None:
    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(b"\0" * (8 << 20)))
    with pytest.raises(StabInputError, match="max_decompression_ratio"):
        read(path)


def test_uncompressed_file_over_max_input_bytes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", "1000")
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(good_lines()) + b"\n")
    with pytest.raises(StabInputError, match="max_input_bytes"):
        read(path)


def test_cut_off_gzip_still_reads_what_decompresses(tmp_path) -> None:
    body = b"\n".join(good_lines(2000)) + b"\n"
    packed = gzip.compress(body)
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    run = read(path)
    src = run.source
    assert 100 < run.frame.height < 2000
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert any("gzip" in w and "ends early" in w for w in src.warnings)
    for step, value in zip(run.frame["step"].to_list(), run.frame["loss"].to_list(), strict=True):
        assert same(value, loss_at(step))


def test_concatenated_gzip_members_read_as_one_log(tmp_path) -> None:
    lines = good_lines()
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes(
        gzip.compress(b"\n".join(lines[:30]) + b"\n") + gzip.compress(b"\n".join(lines[30:]))
    )
    check_exact(read(path), set())


def test_read_bytes_keeps_its_signature_for_rank_folders(tmp_path) -> None:
    path = tmp_path / "rank0.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"step": 1, "loss": 2.0}\n'))
    assert jsonl.read_bytes(path) == b'{"step": 1, "loss": 2.0}\n'
    assert ReadOptions().limits.max_json_depth == 64


@pytest.mark.parametrize("nonfinite", [True, False], ids=["pyarrow-path", "polars-path"])
def test_jsonl_integers_past_int64(tmp_path, nonfinite) -> None:
    lines = good_lines()
    if not nonfinite:
        lines = [json.dumps({"step": s, "loss": 2.0 + s / 1000}).encode() for s in range(60)]
    lines[10] = b'{"step": 10, "loss": 2.5, "tokens": 1' + b"0" * 30 + b"}"  # a float: kept
    lines[20] = b'{"step": 20, "loss": 2.5, "tokens": 1' + b"0" * 400 + b"}"  # inf, as 1e400
    lines[30] = b'{"step": 1' + b"0" * 30 + b', "loss": 2.5}'  # no step
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    run = read(path)
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert [r.line for r in src.rejections] == [31]
    assert run.frame.filter(run.frame["step"] == 10)["tokens"].to_list() == [1e30]
    assert run.frame.filter(run.frame["step"] == 20)["tokens"].to_list() == [math.inf]


@pytest.mark.slow  # ~1.5 s: deep JSON read in many windows
def test_json_depth_is_the_same_in_windows(monkeypatch) -> None:
    import random

    rng = random.Random(5)
    texts = [bytes(rng.choice(b'[]{}"\\ax') for _ in range(rng.randint(0, 60))) for _ in range(500)]
    whole = [(bounded.json_depth(t), bounded.deeper_than(t, 2)) for t in texts]
    for window in (1, 2, 3, 7):
        monkeypatch.setattr(bounded, "_LEVEL_WINDOW", window)
        assert [(bounded.json_depth(t), bounded.deeper_than(t, 2)) for t in texts] == whole


def test_damaged_gzip_keeps_the_lines_before_the_damage(tmp_path) -> None:
    body = b"\n".join(good_lines(2000)) + b"\n"
    packed = bytearray(gzip.compress(body))
    packed[len(packed) // 2] ^= 0xFF  # small enough to be one read: one call met the damage
    path = tmp_path / "run.jsonl.gz"
    path.write_bytes(bytes(packed))
    run = read(path)
    src = run.source
    assert run.frame.height > 100
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert any("gzip stream is damaged" in w for w in src.warnings)
    for step, value in zip(run.frame["step"].to_list(), run.frame["loss"].to_list(), strict=True):
        assert same(value, loss_at(step))


@pytest.mark.parametrize("tail", ["", "not json\n"])  # the fast readers, and the per-line pass
def test_a_key_named_row_is_kept_and_not_taken_for_the_line_number(tmp_path, tail: str):
    # the log's `_row` overwrote (or was overwritten by) the line numbers stab keeps
    path = tmp_path / "run.jsonl"
    path.write_text(
        '{"step": 1, "loss": 2.0, "_row": 7}\n{"step": 2, "loss": NaN, "_row": 9}\n'
        '{"step": 3, "loss": 2.2}\n' + tail
    )
    run = read(path)
    assert run.frame["_row (as logged)"].to_list() == [7, 9, None]
    assert [r.line for r in run.source.rejections] == ([4] if tail else [])
    assert any("'_row (as logged)'" in note for note in run.source.notes)
    assert math.isnan(run.frame["loss"][1])


def test_a_metric_key_with_thousands_of_digits_is_matched_not_a_crash(tmp_path):
    """Keys are ordered naturally (pg2 before pg10); that order took int() of each run of
    digits, and int() refuses 4,300 digits or more: a key like loss1111... (5,000 ones)
    rejected the whole log with an internal ValueError."""
    from stabilitycli.ingest import read

    path = tmp_path / "run.jsonl"
    # two grad-norm keys: ordering them is what took int() of the digits
    long_key = "grad_norm_" + "1" * 5000
    path.write_text(
        "\n".join(
            f'{{"step": {s}, "loss": 2.0, "grad_norm_2": 0.5, "{long_key}": 1.0}}'
            for s in range(20)
        )
        + "\n"
    )
    run = read(str(path))
    assert run.frame.height == 20
    assert run.frame["loss"].to_list() == [2.0] * 20


def test_a_rank_pattern_that_captures_a_superscript_digit_names_no_rank():
    """'²'.isdigit() is true and int('²') raises: a folder named rank_² under
    --rank-pattern 'rank_(.)' made the reader fail instead of leaving the rank unknown."""
    from stabilitycli.ingest.points import rank_from_name

    assert rank_from_name("rank_²", r"rank_(.)") is None
    assert rank_from_name("rank_7", r"rank_(.)") == 7
