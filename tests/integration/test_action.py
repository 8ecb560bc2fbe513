"""The GitHub Action, the pre-commit hook and the GitLab job of docs/ci.md (#37), run as
written: the action's shell steps with a simulated GitHub environment (summary file,
annotations, exit status, output) for a healthy and a failing run."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, run_fixture

ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
DOCS = (ROOT / "docs" / "ci.md").read_text()


def _env(tmp_path: Path, **inputs: str) -> dict[str, str]:
    """What the runner gives the action's run step: the inputs as the step's env maps them,
    GITHUB_STEP_SUMMARY and GITHUB_OUTPUT files, and `stab` from this checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "STAB_"))}
    env.update(
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
        GITHUB_OUTPUT=str(tmp_path / "output.txt"),
        RUNNER_TEMP=str(tmp_path),
        PYTHONPATH=str(ROOT),
        STAB_BIN=f"{sys.executable} -m stabilitycli",
    )
    step = next(s for s in ACTION["runs"]["steps"] if s.get("id") == "run")
    for name, expression in step["env"].items():
        key = re.fullmatch(r"\$\{\{ inputs\.([a-z-]+) \}\}", expression)
        assert key, expression
        given = inputs.get(key[1].replace("-", "_"))
        env[name] = given if given is not None else ACTION["inputs"][key[1]].get("default", "")
    return env


def _run_step(tmp_path: Path, **inputs: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "action" / "run.sh")],
        env=_env(tmp_path, **inputs),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_action_is_composite_with_the_inputs_the_issue_names() -> None:
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) == {"paths", "fail-on", "recursive", "args", "version"}
    assert ACTION["inputs"]["paths"]["required"] is True
    runs = [s["run"] for s in ACTION["runs"]["steps"]]
    assert any("scripts/action/install.sh" in r for r in runs)
    assert any("scripts/action/run.sh" in r for r in runs)


def test_a_healthy_run_passes_with_a_summary(tmp_path) -> None:
    path = run_fixture("healthy-low-noise").relative_to(ROOT)
    done = _run_step(tmp_path, paths=str(path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"::notice file={path},title=stab verdict%3A healthy::")
    assert "::error" not in done.stdout
    summary = (tmp_path / "summary.md").read_text()
    assert "healthy" in summary and summary.startswith("#")
    assert (tmp_path / "output.txt").read_text() == "exit-code=0\n"


def test_a_failing_run_fails_the_step_with_annotations_on_lines(tmp_path) -> None:
    path = run_fixture("spike-persistent").relative_to(ROOT)
    done = _run_step(tmp_path, paths=f"{path}\n")
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stdout.splitlines() if line.startswith("::error")]
    assert errors and any(re.match(rf"::error file={path},line=\d+,", e) for e in errors)
    assert "spike-persistent" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "output.txt").read_text() == "exit-code=1\n"


def test_fail_on_recursive_and_args_reach_stab(tmp_path) -> None:
    sweep = tmp_path / "sweep"
    for name in ("healthy-low-noise", "spike-long-tail"):
        (sweep / name).mkdir(parents=True)
        shutil.copy(run_fixture(name), sweep / name / "metrics.jsonl")
    done = _run_step(tmp_path, paths=str(sweep), recursive="true", fail_on="warning")
    assert done.returncode == 1, done.stderr  # the recovered spike is a warning
    summary = (tmp_path / "summary.md").read_text()
    assert "## stab: 2 runs" in summary and "spike-long-tail/metrics.jsonl" in summary
    relaxed = _run_step(tmp_path, paths=str(sweep), recursive="true", args="--ignore spike")
    assert relaxed.returncode == 0, relaxed.stdout


def test_no_paths_is_an_error_annotation(tmp_path) -> None:
    done = _run_step(tmp_path, paths="  ")
    assert done.returncode == 2 and done.stdout.startswith("::error title=stab::")


@pytest.mark.parametrize(
    "version, expected", [("", "install --quiet {root}"), ("v0.9.0", "stabilitycli==0.9.0")]
)
def test_install_step_installs_the_tag_or_the_version(version, expected) -> None:
    env = {**os.environ, "STAB_VERSION": version, "STAB_SOURCE": str(ROOT), "STAB_PIP": "echo"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "action" / "install.sh")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert expected.format(root=ROOT) in done.stdout


def _yaml_blocks(text: str) -> list:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]


def test_the_docs_use_the_action_and_the_hook_as_they_are() -> None:
    blocks = _yaml_blocks(DOCS)
    uses = next(b[0] for b in blocks if isinstance(b, list) and "uses" in b[0])
    assert set(uses["with"]) <= set(ACTION["inputs"])
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    config = next(b for b in blocks if isinstance(b, dict) and "repos" in b)
    assert config["repos"][0]["hooks"][0]["id"] in {h["id"] for h in hooks}


def test_the_gitlab_job_of_the_docs_runs_as_written(tmp_path) -> None:
    job = next(b for b in _yaml_blocks(DOCS) if isinstance(b, dict) and "stab" in b)["stab"]
    assert job["artifacts"]["reports"]["junit"] == "stab-junit.xml"
    (tmp_path / "runs" / "latest").mkdir(parents=True)
    shutil.copy(run_fixture("spike-persistent"), tmp_path / "runs/latest/metrics.jsonl")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "stab").write_text(f'#!/bin/sh\nexec {sys.executable} -m stabilitycli "$@"\n')
    (bin_dir / "stab").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    script = [line for line in job["script"] if not line.startswith("pip install")]
    done = subprocess.run(
        ["bash", "-c", " && ".join(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1  # the job fails on the persistent spike
    report = (tmp_path / "stab-junit.xml").read_text()
    assert "<testsuite" in report and "<failure" in report


def _online() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
    except OSError:
        return False
    return True


@pytest.mark.slow
def test_pre_commit_try_repo_runs_the_hook(tmp_path) -> None:
    """`pre-commit try-repo` installs this checkout in its own environment (from PyPI: the
    network) and runs the hook over a repository that commits a log with a NaN."""
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    if pre_commit is None or not _online():
        pytest.skip("pre-commit or the network (to install stab's dependencies) is missing")
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shutil.copy(run_fixture("nan-fp32-origin"), repo / "metrics.jsonl")
    subprocess.run(["git", "add", "metrics.jsonl"], cwd=repo, check=True)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache")}
    done = subprocess.run(
        [pre_commit, "try-repo", str(ROOT), "stab", "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"metrics\.jsonl:\d+: nan error step \d+:", done.stdout)
