"""Issue 16 item 7: the terminal output reads cleanly at 60, 80 and 120 columns.

Every line fits the console; a bullet that wraps continues under its own text, not at
column 0; the run's path and its source line (format, rows, steps, dtype, metrics) are
never cut mid-word, and a path too long for the panel keeps its end; a sparkline stays
on one line; a table that cannot fit (rank outliers, compared metrics, the batch summary)
becomes one bullet per row rather than cutting a number to `5.9…`.
"""

from __future__ import annotations

import io
import shutil
from functools import cache
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from stabilitycli.report import compare_terminal, ranks_terminal, terminal
from tests.conftest import FIXTURES, run_fixture
from tests.report.helpers import analyse_path, analysed

WIDTHS = (60, 80, 120)
# verdicts with long remedies, and a text log whose reader leaves long notes
RUNS = ("spike-persistent", "loss-scale-collapsed", "nan-fp16-overflow", "divergence-weight-norm")
NOTED_LOG = FIXTURES / "textlogs" / "nanogpt" / "train.log"
_BARS = set("▁▂▃▄▅▆▇█×")


def _printed(renderable, width_cells: int) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width_cells, color_system=None, markup=False, emoji=False)
    console.print(renderable)
    return out.getvalue().splitlines()


@cache
def _ranks(name: str):
    from stabilitycli.pipeline import run as pipeline

    return pipeline.ranks(str(FIXTURES / "ranks" / name))


@cache
def _comparison(band: str):
    from stabilitycli.compare.runs import CompareOptions, compare
    from stabilitycli.pipeline.run import load_run

    base = load_run(str(run_fixture("spike-persistent")))
    fixed = load_run(str(FIXTURES / "compare" / "fix-removes-spike" / "run.jsonl"))
    return compare(base, fixed, CompareOptions(band=band, until=99_999))


def _analysis(name: str):
    return analysed(name)[1] if name in RUNS else analyse_path(NOTED_LOG)[1]


def _deep_copy(tmp_path: Path) -> Path:
    """spike-persistent, copied into folders deep enough that no console here fits the path."""
    folder = tmp_path.joinpath(
        *(f"experiments-2026-{i:02d}-sweep-learning-rate" for i in range(6)), "seed-17"
    )
    folder.mkdir(parents=True)
    return Path(shutil.copy(run_fixture("spike-persistent"), folder / "run.jsonl"))


def _hangs(lines: list[str], mark: str, items: list[str]) -> None:
    """Each item starts on a line of its own at `mark`, and every further line of it starts
    exactly where its text did."""
    for item in items:
        want = " ".join(item.split())
        starts = [
            i
            for i, line in enumerate(lines)
            if line.lstrip().startswith(f"{mark} ")
            and want.startswith(" ".join(line.lstrip()[len(mark) :].split()))
        ]
        assert starts, f"no bullet starts {item[:40]!r}"
        at = starts[0]
        column = lines[at].index(mark) + len(mark) + 1
        said = lines[at][column:].strip()
        for line in lines[at + 1 :]:
            if said == want:
                break
            assert len(said) < len(want), f"{item[:40]!r} does not read back: {said!r}"
            assert line[:column].strip() == "" and line[column : column + 1].strip(), (
                f"{item[:40]!r} continues at the wrong column: {line!r}"
            )
            said = f"{said} {line.strip()}"
        assert said == want


def _hangs_from_margin(lines: list[str], items: list[str], indent_cells: int = 2) -> None:
    """Each item starts at column 0 and its further lines at `indent_cells`, so that one
    sentence of a list does not run into the next."""
    for item in items:
        want = " ".join(item.split())
        at = next(
            i
            for i, line in enumerate(lines)
            if line[:1].strip() and want.startswith(" ".join(line.split()))
        )
        said = " ".join(lines[at].split())
        for line in lines[at + 1 :]:
            if said == want:
                break
            assert line[:indent_cells] == " " * indent_cells and line[indent_cells:][:1].strip(), (
                f"{item[:40]!r} continues at the wrong column: {line!r}"
            )
            said = f"{said} {line.strip()}"
        assert said == want


def _words(lines: list[str]) -> set[str]:
    """Every word printed, without the punctuation that follows it in a sentence."""
    return {word.strip(",;:()") for word in " ".join(lines).split()}


def _panel_text(lines: list[str]) -> list[str]:
    """The text inside the first panel, one entry a line, borders and padding stripped."""
    top = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("╰"))
    return [line.strip("│ ") for line in lines[top + 1 : bottom]]


def _bar_only(line: str) -> bool:
    text = line.strip()
    return bool(text) and set(text) <= _BARS


# ---------------------------------------------------------------- every line fits


@pytest.mark.parametrize("width_cells", WIDTHS)
@pytest.mark.parametrize("name", [*RUNS, "nanogpt-log"])
def test_analyze_fits_the_console(name, width_cells) -> None:
    lines = _printed(terminal.build(_analysis(name)), width_cells)
    assert [line for line in lines if cell_len(line.rstrip()) > width_cells] == []
    # the loss sparkline is one line: no row of bars wrapped off it
    assert [line for line in lines if _bar_only(line)] == []
    assert any(line.startswith("loss ") for line in lines)


@pytest.mark.parametrize("width_cells", WIDTHS)
@pytest.mark.parametrize("band", ["one-sided", "two-sided"])
def test_compare_fits_the_console(band, width_cells) -> None:
    lines = _printed(compare_terminal.build(_comparison(band)), width_cells)
    assert [line for line in lines if cell_len(line.rstrip()) > width_cells] == []
    curves = [line for line in lines if line.startswith("loss ")]
    assert len(curves) == 2 and [line for line in lines if _bar_only(line)] == []
    result = _comparison(band)
    assert result.problems  # --until beyond both runs
    _hangs(lines, "•", list(result.problems))


@pytest.mark.parametrize("width_cells", WIDTHS)
@pytest.mark.parametrize("name", ["two_outliers.jsonl.gz", "straggler.jsonl.gz"])
def test_rank_outliers_show_every_number_whole(name, width_cells) -> None:
    """A table too wide for the console becomes a list: no `5.9…`, no folded `1.18e+04`."""
    report = _ranks(name)
    lines = _printed(ranks_terminal.build(report), width_cells)
    assert [line for line in lines if cell_len(line.rstrip()) > width_cells] == []
    words = _words(lines)
    for o in report.outliers:
        for value in (o.value, o.cohort_median, o.robust_z):
            assert ranks_terminal.fmt(value) in words
        assert ranks_terminal.fmt(o.mean_shift, sign=True) in words
    # the heatmap keeps its rank labels and its last step
    assert f"{int(report.picture.step_edges[-1]) - 1}" in words
    assert all(f"{o.rank}" in words for o in report.outliers)


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_compared_metrics_show_every_name_and_number_whole(width_cells) -> None:
    result = _comparison("one-sided")
    lines = _printed(compare_terminal.build(result), width_cells)
    words = _words(lines)
    # each metric's row (or bullet) starts with its whole name, its point count beside it
    for m in result.metrics:
        rows = [line for line in lines if line.lstrip(" •").startswith(f"{m.metric} ")]
        rows += [line for line in lines if line.lstrip(" •").startswith(f"{m.metric}: ")]
        assert any(str(m.points) in _words([row]) for row in rows), m.metric
        assert compare_terminal._g(m.stats["max_abs_deviation"]) in words


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_the_batch_summary_keeps_every_column(width_cells) -> None:
    from stabilitycli.pipeline.batch import BatchSettings, analyze_one, summary_rows
    from stabilitycli.report import batch_report

    names = ("plateau", "loss-scale-collapsed", "spike-persistent")
    results = [analyze_one(str(run_fixture(n)), BatchSettings()) for n in names]
    lines = _printed(batch_report.terminal_table(results), width_cells)
    assert [line for line in lines if cell_len(line.rstrip()) > width_cells] == []
    words = _words(lines)
    for row in summary_rows(results):
        assert {row["run"], row["verdict"], f"{row['rows']:,}", str(row["first_bad_step"])} <= words
        assert row["cause"] is None or row["cause"] in words


# ---------------------------------------------------------------- bullets hang


@pytest.mark.parametrize("width_cells", WIDTHS)
@pytest.mark.parametrize("name", RUNS)
def test_remedies_wrap_under_their_text(name, width_cells) -> None:
    analysis = _analysis(name)
    assert analysis.verdict.remediation
    lines = _printed(terminal.build(analysis), width_cells)
    _hangs(lines, "•", list(analysis.verdict.remediation))


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_notes_wrap_under_their_text(width_cells) -> None:
    analysis = _analysis("nanogpt-log")
    notes = [*analysis.source.warnings, *analysis.source.notes]
    assert max(map(len, notes)) > max(WIDTHS)  # one wraps at every width tested
    _hangs(_printed(terminal.build(analysis), width_cells), "-", notes)


@pytest.mark.parametrize("width_cells", WIDTHS)
@pytest.mark.parametrize("name", ["pair_2.jsonl", "mixed_names"])
def test_rank_notes_wrap_under_their_text(name, width_cells) -> None:
    report = _ranks(name)
    assert report.notes
    _hangs(_printed(ranks_terminal.build(report), width_cells), "-", list(report.notes))


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_rank_effects_hang_from_the_margin(width_cells) -> None:
    report = _ranks("two_outliers.jsonl.gz")
    effects = ranks_terminal.mean_effect_text(report).split("\n")
    assert max(map(len, effects)) > max(WIDTHS)
    _hangs_from_margin(_printed(ranks_terminal.build(report), width_cells), effects)


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_compare_legend_hangs_from_the_margin(width_cells) -> None:
    lines = _printed(compare_terminal.build(_comparison("one-sided")), width_cells)
    legend = [line for line in lines if line.startswith("out: ")]
    assert legend  # the legend of the table's columns, longer than any width here
    at = lines.index(legend[0])
    assert all(line.startswith("  ") for line in lines[at + 1 : at + 3])


# ---------------------------------------------------------------- path and source line


def _source_reads_whole(analysis, width_cells: int) -> str:
    """The path line as shown; the source line below it must be the whole line, no word cut."""
    inside = _panel_text(_printed(terminal.build(analysis), width_cells))
    path = analysis.source.path
    at = next(
        i
        for i, line in enumerate(inside)
        if line == path or (line.startswith("…/") and path.endswith(line[1:]))
    )
    words = " ".join(inside[at + 1 :]).split()
    assert words == terminal._source_line(analysis, with_metrics=analysis.coverage is None).split()
    return inside[at]


@pytest.mark.parametrize("width_cells", WIDTHS)
@pytest.mark.parametrize("name", RUNS)
def test_path_and_source_line_are_whole(name, width_cells) -> None:
    analysis = _analysis(name)
    shown = _source_reads_whole(analysis, width_cells)
    if cell_len(analysis.source.path) <= width_cells - 4:
        assert shown == analysis.source.path


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_a_deep_path_keeps_its_end(tmp_path, width_cells) -> None:
    log = _deep_copy(tmp_path)
    analysis = analyse_path(log)[1]
    assert cell_len(str(log)) > max(WIDTHS)
    shown = _source_reads_whole(analysis, width_cells)
    assert shown.startswith("…/") and shown.endswith("/seed-17/run.jsonl")
    assert cell_len(shown) <= width_cells - 4
    # the panel keeps as much of the path as fits: one more folder would not
    cut = str(log).rindex("/", 0, len(str(log)) - len(shown) + 1)
    assert cell_len("…" + str(log)[cut:]) > width_cells - 4


def test_a_piped_console_shows_the_whole_path(tmp_path) -> None:
    """Measured for a pipe (as wide as the widest line), nothing is elided."""
    analysis = analyse_path(_deep_copy(tmp_path))[1]
    rendered = terminal.build(analysis)
    width_cells = Console(width=10_000).measure(rendered).maximum
    assert _source_reads_whole(analysis, width_cells) == analysis.source.path


@pytest.mark.parametrize("width_cells", WIDTHS)
def test_a_long_run_name_is_never_cut(tmp_path, width_cells) -> None:
    """The run name is the panel's title when it fits; else a line of its own in the panel,
    wrapped at its spaces, and the title says only `stab`."""
    name = "lr sweep " + " ".join(f"warmup-{n}-steps" for n in range(0, 2000, 200))
    folder = tmp_path / name
    folder.mkdir()
    log = Path(shutil.copy(run_fixture("spike-persistent"), folder / "run.jsonl"))
    analysis = analyse_path(log)[1]
    assert analysis.source.run == name and cell_len(name) > max(WIDTHS)
    lines = _printed(terminal.build(analysis), width_cells)
    assert lines[0].strip("╭─╮ ") == "stab"
    inside = _panel_text(lines)
    at = next(i for i, line in enumerate(inside) if line.startswith("run: "))
    path_at = next(i for i, line in enumerate(inside) if line.endswith("run.jsonl"))
    assert " ".join(inside[at:path_at]).split() == f"run: {name}".split()
