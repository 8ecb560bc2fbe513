"""Where nothing caps memory, the pieces of a large JSONL log are parsed two at once on
worker threads, and the reader numbers, rejects and keeps them in order (issue 40). The
run must be the very run one parse at a time gives (what a cap on memory keeps): the same
frame, the same rejected lines by number, the same warnings, the same errors.

The pieces are made small (a few hundred bytes to a fortieth of the log), so that a log is
cut into many and the two workers race to finish them out of order."""

from __future__ import annotations

import json

import pytest
from polars.testing import assert_frame_equal

from stabilitycli import read
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.jsonl import parse as jsonl_parse
from stabilitycli.ingest.jsonl import pieces as jsonl_pieces
from stabilitycli.ingest.jsonl import reader as jsonl
from tests.conftest import FIXTURES

LOGS = sorted(p for p in FIXTURES.rglob("*.jsonl") if p.stat().st_size > 300)


def _read(path, monkeypatch, *, capped: bool, piece_bytes: int = 256):
    """The run read in pieces, one parse at a time (`capped`) or two at once; and how many
    pieces were parsed ahead on the workers."""
    ahead = []
    clean_parse = jsonl_parse.clean_parse

    def counted(*args, **kwargs):
        parsed = clean_parse(*args, **kwargs)
        ahead.append(parsed is not None)
        return parsed

    with monkeypatch.context() as patch:
        patch.setattr(jsonl, "PIECE_BYTES", piece_bytes)
        patch.setattr(jsonl_pieces, "memory_capped", lambda: capped)
        patch.setattr(jsonl_parse, "clean_parse", counted)
        return read(path), sum(ahead)


def _same(one, two) -> None:
    assert_frame_equal(two.frame, one.frame)
    assert_frame_equal(two.abandoned, one.abandoned)
    assert two.source.to_dict() == one.source.to_dict()  # rejections in order, warnings


@pytest.mark.parametrize("path", LOGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_two_pieces_at_once_read_every_fixture_as_one_at_a_time(path, monkeypatch) -> None:
    # some 40 pieces a log: 256-byte pieces made thousands of the larger fixtures, 100 s of
    # the suite, for no race the forty do not run
    piece_bytes = max(256, path.stat().st_size // 40)
    try:
        one, parsed_in_turn = _read(path, monkeypatch, capped=True, piece_bytes=piece_bytes)
    except StabInputError as err:
        with pytest.raises(StabInputError) as again:
            _read(path, monkeypatch, capped=False, piece_bytes=piece_bytes)
        assert str(again.value) == str(err)
        return
    two, parsed_ahead = _read(path, monkeypatch, capped=False, piece_bytes=piece_bytes)
    assert parsed_in_turn == 0  # under a cap nothing is parsed ahead
    assert parsed_ahead > 0  # and without one the workers did parse ahead
    _same(one, two)


def _log(tmp_path, rows: int = 2_000) -> object:
    """Clean pieces, and later pieces the fast readers refuse or the screen flags: bad
    JSON, a step that is a list, a line nested too deep, a key that first appears late,
    a column that turns fractional, NaN, a blank line and a last line cut off."""
    lines = [json.dumps({"step": i, "rank": i % 4, "loss": 2.0 + i % 7}) for i in range(rows)]
    lines[700] = '{"step": 700, "loss": '
    lines[901] = '{"step": [901], "rank": 1, "loss": 2.0}'
    lines[1_203] = '{"step": 1203, "deep": ' + "[" * 5_000 + "]" * 5_000 + "}"
    lines[1_500] = '{"step": 1500, "rank": 0, "loss": 2.5, "eval_loss": 1.25}'
    lines[1_600] = '{"step": 1600, "rank": 0, "loss": NaN}'
    lines[1_800] = ""
    log = tmp_path / "run.jsonl"
    log.write_text("\n".join(lines) + '\n{"step": 99999, "lo')
    return log


@pytest.mark.parametrize("piece_bytes", [300, 2_048, 8_192])
def test_bad_lines_in_later_pieces_are_rejected_and_warned_in_order(
    tmp_path, monkeypatch, piece_bytes
) -> None:
    log = _log(tmp_path)
    one, _ = _read(log, monkeypatch, capped=True, piece_bytes=piece_bytes)
    two, parsed_ahead = _read(log, monkeypatch, capped=False, piece_bytes=piece_bytes)
    _same(one, two)
    assert parsed_ahead > 1  # the clean pieces were parsed on the workers
    assert [r.line for r in two.source.rejections] == [701, 902, 1204, 2001]
    assert two.source.warnings[0].startswith("line 2001: last line cut off")


def test_a_limit_hit_while_pieces_are_parsed_ahead_is_the_same_input_error(
    tmp_path, monkeypatch
) -> None:
    log = _log(tmp_path)
    size = log.stat().st_size
    monkeypatch.setattr(jsonl_pieces.bounded, "refuse_oversize", lambda *args: None)
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", str(size // 2))
    for capped in (True, False):
        with pytest.raises(StabInputError, match="grew past the limit while read"):
            _read(log, monkeypatch, capped=capped, piece_bytes=500)
