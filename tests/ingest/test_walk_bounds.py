"""Folder walks always end (#12): no recursion on a deep tree, each folder entered once
however many symlinks lead back to it, and `max_walk_files` / `max_walk_depth` enforced
with a message that names the setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stabilitycli.cli import app
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.folders import WalkReport, list_folder, walk
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.pipeline.batch import discover

DEEP_LEVELS = 1_500


def _log(path: Path, rows: int = 60) -> Path:
    path.write_text(
        "".join(json.dumps({"step": i, "loss": 3.0 - i * 0.01}) + "\n" for i in range(rows))
    )
    return path


@pytest.fixture
def deep(tmp_path):
    """(`deep`, its log): `deep/d/d/.../d/run.jsonl`, 1,500 folders deep (os.mkdir, as
    os.makedirs recurses). Removed here, bottom up: pytest's own clean-up of old temporary
    folders uses a recursive shutil.rmtree that a tree this deep crashes in a later run."""
    root = tmp_path / "deep"
    root.mkdir()
    made = [root]
    for _ in range(DEEP_LEVELS):
        made.append(made[-1] / "d")
        os.mkdir(made[-1])
    log = _log(made[-1] / "run.jsonl")
    yield root, log
    log.unlink()
    for folder in reversed(made):
        os.rmdir(folder)


def _looped(root: Path) -> Path:
    """A folder with one log and two symlinks to itself: a naive walk never returns."""
    root.mkdir()
    _log(root / "run.jsonl")
    os.symlink(".", root / "a")
    os.symlink(".", root / "b")
    return root


def _stab(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.stdout + result.stderr
    return result


def test_a_1500_deep_tree_is_walked_without_recursion(deep) -> None:
    root, log = deep
    limits = InputLimits(max_walk_depth=DEEP_LEVELS + 10)
    walked = list(walk(root, limits=limits))
    assert len(walked) == DEEP_LEVELS + 1
    assert [f for _folder, _sub, files in walked for f in files] == [log]


def test_recursive_over_a_1500_deep_tree_is_a_clear_error(deep) -> None:
    root, _log_file = deep
    with pytest.raises(StabInputError, match="max_walk_depth"):
        discover([str(root)], recursive=True)
    result = _stab("analyze", "-r", root, "-j", "1", "-q")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("stab: error: ")
    assert "levels below" in line
    assert "STAB_LIMIT_MAX_WALK_DEPTH" in line


def test_the_tensorboard_sniff_of_a_deep_tree_says_no_instead_of_recursing(deep) -> None:
    from stabilitycli.ingest.tensorboard import reader as tensorboard

    root, _log_file = deep
    assert tensorboard.sniff(root, b"") is False


def test_two_symlinks_to_dot_are_each_skipped_with_a_warning(tmp_path) -> None:
    root = _looped(tmp_path / "loop")
    report = WalkReport()
    walked = [folder for folder, _sub, _files in walk(root, report=report)]
    assert walked == [root]
    assert report.loops == [root / "a", root / "b"]
    warnings: list[str] = []
    assert discover([str(root)], recursive=True, warnings=warnings) == [str(root / "run.jsonl")]
    assert len(warnings) == 2
    assert all("symlink loop" in w for w in warnings)


def test_recursive_over_a_symlink_loop_ends_with_the_run_and_a_warning(tmp_path) -> None:
    """In a subprocess: before the fix this never returned. The timeout only guards the
    suite; the assertions are on what stab printed."""
    root = _looped(tmp_path / "loop")
    done = subprocess.run(
        [sys.executable, "-m", "stabilitycli.cli", "analyze", "-r", str(root), "-j", "1", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    assert f"{root / 'a'}: not walked again" in done.stderr
    assert f"{root / 'b'}: not walked again" in done.stderr
    assert "1 runs" in done.stdout or "1 run" in done.stdout


def _wide(root: Path, folders: int, logs_each: int) -> Path:
    root.mkdir()
    for i in range(folders):
        sub = root / f"group{i}"
        sub.mkdir()
        for j in range(logs_each):
            _log(sub / f"part{j}.jsonl", rows=5)
    return root


def test_max_walk_files_from_the_environment_stops_the_walk(tmp_path, monkeypatch) -> None:
    root = _wide(tmp_path / "runs", folders=4, logs_each=3)
    monkeypatch.setenv("STAB_LIMIT_MAX_WALK_FILES", "6")
    with pytest.raises(StabInputError, match="max_walk_files = 6"):
        list(walk(root))
    with pytest.raises(StabInputError, match="max_walk_files"):
        discover([str(root)], recursive=True)
    result = _stab("analyze", "-r", root, "-j", "1", "-q")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "more than 6 files and folders below it" in line
    assert "STAB_LIMIT_MAX_WALK_FILES" in line
    monkeypatch.setenv("STAB_LIMIT_MAX_WALK_FILES", "100")
    assert len(discover([str(root)], recursive=True)) == 12


def test_one_folder_listing_is_bounded_too(tmp_path) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_text("")
    assert list_folder(tmp_path, InputLimits(max_walk_files=5)) == sorted(tmp_path.iterdir())
    with pytest.raises(StabInputError, match="more than 4 entries in this folder"):
        list_folder(tmp_path, InputLimits(max_walk_files=4))


def test_the_walk_keeps_the_depth_first_name_order(tmp_path) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    _log(root / "a.jsonl")
    (root / "b").mkdir()
    _log(root / "b" / "x.jsonl")
    _log(root / "b" / "y.jsonl")
    _log(root / "c.jsonl")
    expected = [root / "a.jsonl", root / "b" / "x.jsonl", root / "b" / "y.jsonl", root / "c.jsonl"]
    assert discover([str(root)], recursive=True) == [str(p) for p in expected]


def test_an_unreadable_folder_is_a_warning_not_a_silent_skip(tmp_path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("root lists a mode-000 folder")
    root = tmp_path / "runs"
    root.mkdir()
    _log(root / "a.jsonl")
    (root / "locked").mkdir()
    _log(root / "locked" / "b.jsonl")
    (root / "locked").chmod(0)
    try:
        warnings: list[str] = []
        assert discover([str(root)], recursive=True, warnings=warnings) == [str(root / "a.jsonl")]
    finally:
        (root / "locked").chmod(0o700)
    assert warnings == [f"{root / 'locked'}: not walked: permission denied"]


def test_without_following_symlinks_a_linked_folder_is_listed_not_entered(tmp_path) -> None:
    """os.walk's default, kept by the readers that used it (TensorBoard, MLflow params)."""
    root = _looped(tmp_path / "loop")
    (root / "real").mkdir()
    _log(root / "real" / "inner.jsonl")
    os.symlink("real", root / "linked")
    walked = list(walk(root, follow_symlinks=False))
    assert [folder for folder, _sub, _files in walked] == [root, root / "real"]
    assert walked[0][1] == [root / "a", root / "b", root / "linked", root / "real"]


def test_the_limits_given_to_read_bound_its_folder_listing(tmp_path) -> None:
    from stabilitycli.ingest import read
    from stabilitycli.ingest.options import ReadOptions

    for name in ("a.txt", "b.txt", "notes.md"):
        (tmp_path / name).write_text("hello\n")
    _log(tmp_path / "run.jsonl")
    assert read(tmp_path).source.path == str(tmp_path / "run.jsonl")
    with pytest.raises(StabInputError, match="more than 3 entries in this folder"):
        read(tmp_path, ReadOptions(limits=InputLimits(max_walk_files=3)))


def test_every_folder_listing_goes_through_the_walk_helper() -> None:
    """A new os.walk or rglob would bring back the recursion, the loops and the unbounded
    listings; ingest/folders.py is the one place that lists folders."""
    import re

    import stabilitycli

    package = Path(stabilitycli.__file__).parent
    listing = re.compile(r"os\.walk\(|\.rglob\(|\.iterdir\(|os\.listdir\(|\.glob\(|os\.scandir\(")
    found = [
        f"{source.relative_to(package)}:{number}"
        for source in sorted(package.rglob("*.py"))
        if source != package / "ingest" / "folders.py"
        for number, line in enumerate(source.read_text().splitlines(), 1)
        if listing.search(line)
    ]
    assert found == []
