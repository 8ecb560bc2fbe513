"""trainer_state.json damaged in the middle, not only cut off (issue #12): every entry that
still parses is kept, before and after the damage; only damage that runs to the end of
the file is a cut-off."""

from __future__ import annotations

import json

import pytest

from stabilitycli.ingest import read
from tests.ingest.test_hostile_json import DEEP, check_exact, loss_at

# --- Hugging Face trainer_state.json ---------------------------------------------------


def _state_bytes(n: int = 200) -> bytes:
    history = [
        {"epoch": s / 100, "grad_norm": 1.0, "learning_rate": 1e-4, "loss": loss_at(s), "step": s}
        for s in range(n)
    ]
    state = {"global_step": n, "logging_steps": 1, "log_history": history, "max_steps": n}
    return json.dumps(state, indent=2).encode()  # as the Trainer writes it


def _hf_damage(kind: str) -> bytes:
    text = _state_bytes()
    at = text.index(b'"step": 100\n')
    if kind == "non-UTF-8 byte":
        return text[: at + 6] + b"\xff" + text[at + 7 :]  # the colon after "step"
    if kind == "NUL":
        return text[: at + 3] + b"\x00" + text[at + 4 :]
    if kind == "broken quote":
        return text[:at] + b"x" + text[at + 1 :]
    if kind == "broken opening brace":
        opening = text.rindex(b"{", 0, at)
        return text[:opening] + b"}" + text[opening + 1 :]
    if kind == "100k-deep nesting":
        return text.replace(b'"step": 100\n', b'"step": 100, "x": ' + DEEP + b"\n", 1)
    if kind == "step a list":
        return text.replace(b'"step": 100\n', b'"step": [100]\n', 1)
    if kind == "step a bool":
        return text.replace(b'"step": 100\n', b'"step": true\n', 1)
    raise AssertionError(kind)


HF_CASES = [
    "non-UTF-8 byte",
    "NUL",
    "broken quote",
    "broken opening brace",
    "100k-deep nesting",
    "step a list",
    "step a bool",
]


@pytest.mark.parametrize("kind", HF_CASES)
def test_hf_damage_in_the_middle_loses_one_entry_not_half(tmp_path, kind) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(_hf_damage(kind))
    run = read(path)
    src = run.source
    check_exact(run, {100}, n=200)
    assert src.rows_rejected == 1, src.rejections
    assert src.rejections[0].line == 101  # the entry's number in log_history
    assert not any("cut off" in w for w in src.warnings), src.warnings


def test_hf_damage_names_the_byte_and_line(tmp_path) -> None:
    path = tmp_path / "trainer_state.json"
    damaged = _hf_damage("non-UTF-8 byte")
    path.write_bytes(damaged)
    src = read(path).source
    byte = damaged.index(b"\xff")
    line = damaged.count(b"\n", 0, byte) + 1
    assert any(f"damaged at byte {byte} (line {line})" in w for w in src.warnings), src.warnings


def test_hf_cut_off_is_still_called_a_cut_off(tmp_path) -> None:
    text = _state_bytes()
    path = tmp_path / "trainer_state.json"
    path.write_bytes(text[: text.index(b'"step": 100\n')])
    run = read(path)
    check_exact(run, set(range(100, 200)), n=200)
    assert run.source.rows_rejected == 1
    assert run.source.rejections[0].reason == "log entry cut off mid-write"
    assert any("cut off" in w for w in run.source.warnings)


def test_hf_cut_off_after_the_history_keeps_every_entry(tmp_path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(_state_bytes()[:-20])
    run = read(path)
    check_exact(run, set(), n=200)
    assert run.source.rows_rejected == 0
    assert any("cut off after its log history" in w for w in run.source.warnings)


def test_hf_two_damaged_entries_far_apart(tmp_path) -> None:
    text = _state_bytes()
    for step in (20, 150):
        at = text.index(b'"step": %d\n' % step)
        text = text[: at + 2] + b"\xfe" + text[at + 3 :]
    path = tmp_path / "trainer_state.json"
    path.write_bytes(text)
    run = read(path)
    check_exact(run, {20, 150}, n=200)
    assert run.source.rows_rejected == 2


def test_hf_integer_too_long_to_convert_rejects_its_entry(tmp_path) -> None:
    text = _state_bytes().replace(b'"step": 100\n', b'"step": ' + b"9" * 5000 + b"\n", 1)
    path = tmp_path / "trainer_state.json"
    path.write_bytes(text)
    run = read(path)
    check_exact(run, {100}, n=200)
    assert run.source.rows_rejected == 1 and "digits" in run.source.rejections[0].reason
    assert not any("at byte -1" in w for w in run.source.warnings)


def test_hf_integers_past_int64(tmp_path) -> None:
    text = _state_bytes()
    text = text.replace(b'"step": 100\n', b'"step": 100, "n": 1' + b"0" * 400 + b"\n", 1)
    text = text.replace(b'"step": 120\n', b'"step": 1' + b"0" * 30 + b"\n", 1)
    path = tmp_path / "trainer_state.json"
    path.write_bytes(text)
    run = read(path)
    check_exact(run, {120}, n=200)
    assert [r.line for r in run.source.rejections] == [121]
    assert run.frame.filter(run.frame["step"] == 100)["n"].to_list() == [float("inf")]


def test_hf_many_damaged_entries_stay_linear(tmp_path) -> None:
    import random
    import time

    text = bytearray(_state_bytes(20_000))
    rng = random.Random(3)
    for _ in range(1500):
        text[rng.randrange(len(text))] = 0xFF
    path = tmp_path / "trainer_state.json"
    path.write_bytes(bytes(text))
    started = time.monotonic()
    src = read(path).source
    assert time.monotonic() - started < 30  # was minutes: each place counted from the start
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert 1000 < src.rows_rejected <= 1500


def test_hf_damaged_log_history_key_still_finds_the_entries(tmp_path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(_state_bytes().replace(b'"log_history"', b'"log_hist\xffry"', 1))
    run = read(path)
    check_exact(run, set(), n=200)
    assert any("damaged at byte" in w for w in run.source.warnings)


def test_hf_damaged_history_bracket_still_finds_the_entries(tmp_path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(_state_bytes().replace(b'"log_history": [', b'"log_history": "xx"', 1))
    run = read(path)
    check_exact(run, set(), n=200)
    src = run.source
    assert src.rows_read == src.rows_used + src.rows_rejected
    assert src.rows_rejected == 1  # the array's opening, counted where it was


def test_hf_renamed_log_history_key_in_valid_json(tmp_path) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_bytes(_state_bytes().replace(b'"log_history"', b'"log_hi)tory"', 1))
    run = read(path)
    check_exact(run, set(), n=200)
    assert any("the key looks damaged" in w for w in run.source.warnings)
