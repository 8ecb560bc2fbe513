"""Golden snapshots of what `stab ranks`, `compare`, `postmortem` and `explain` print.

As `test_snapshots` does for `analyze` (and ruff does for its CLI): each case is one command
line on committed fixtures, run in-process from the repository root on relative paths, with
the terminal at 100 columns, and its snapshot holds the arguments, the exit status, stdout
and stderr, with the repository's path, the version and the date scrubbed. A change to any
of them fails here with a diff; when the change is meant:

    .venv/bin/python -m pytest tests/commands/test_command_snapshots.py --snapshot-update

and review the diff of tests/commands/__snapshots__/test_command_snapshots.ambr.
"""

from __future__ import annotations

import re
import shlex

import pytest

from tests.commands.test_snapshots import _run, _text

COMPARE = "fixtures/compare"
RANKS = "fixtures/ranks"
RUNS = "fixtures/runs"

# case id -> the arguments after `stab`; each a different path through its command
CASES: dict[str, tuple[str, ...]] = {
    # ranks: healthy, each kind of bad rank, a per-rank folder, JSON, a refused metric
    "ranks-healthy": ("ranks", f"{RANKS}/healthy_64.jsonl.gz"),
    "ranks-outlier-folder": ("ranks", f"{RANKS}/seed_64"),
    "ranks-two-outliers": ("ranks", f"{RANKS}/two_outliers.jsonl.gz"),
    "ranks-nonfinite": ("ranks", f"{RANKS}/nan_rank.jsonl.gz"),
    "ranks-silent": ("ranks", f"{RANKS}/silent_rank.jsonl.gz"),
    "ranks-straggler": ("ranks", f"{RANKS}/straggler.jsonl.gz"),
    "ranks-straggler-fail-on-warning": (
        "ranks",
        "--run",
        f"{RANKS}/straggler.jsonl.gz",
        "--fail-on",
        "warning",
    ),
    "ranks-json": ("ranks", f"{RANKS}/seed_64", "--format", "json"),
    "ranks-no-such-metric": ("ranks", f"{RANKS}/trio_3.jsonl", "-m", "no_such_metric"),
    # compare: two runs that agree, that drift apart, a fix verified with --expect (the line
    # docs/compare-contract.md shows), a restart against what it replaced, JSON, refused input
    "compare-identical": (
        "compare",
        f"{COMPARE}/baseline/run.jsonl",
        f"{COMPARE}/rerun-identical/run.jsonl",
    ),
    "compare-drift": (
        "compare",
        f"{COMPARE}/baseline/run.jsonl",
        f"{COMPARE}/rerun-drift/run.jsonl",
    ),
    "compare-fix-verified": (
        "compare",
        f"{RUNS}/spike-long-tail/run.jsonl",
        f"{COMPARE}/fix-removes-spike/run.jsonl",
        "--until",
        "890",
        "--tolerance",
        "0.05",
        "--expect",
        "loss@900<3.0",
        "--expect",
        "max(grad_norm)[880:920]<3.0",
        "--expect",
        "baseline:loss@900>3.0",
    ),
    "compare-expect-on-one-run": (
        "compare",
        f"{RUNS}/spike-long-tail/run.jsonl",
        "--expect",
        "loss@900<3.0",
    ),
    "compare-restart-optimizer-lost": (
        "compare",
        f"{COMPARE}/restart-two-optimizer-lost/run.jsonl",
        "--restart",
        "1",
    ),
    "compare-drift-json": (
        "compare",
        f"{COMPARE}/baseline/run.jsonl",
        f"{COMPARE}/rerun-drift/run.jsonl",
        "--format",
        "json",
    ),
    "compare-bad-expect": (
        "compare",
        f"{RUNS}/spike-long-tail/run.jsonl",
        "--expect",
        "loss@@900<",
    ),
    # postmortem: one run per kind of incident, a healthy run, a per-rank run, a missing file
    "postmortem-spike": ("postmortem", f"{RUNS}/spike-long-tail/run.jsonl", "-o", "-"),
    "postmortem-spike-persistent": ("postmortem", f"{RUNS}/spike-persistent/run.jsonl", "-o", "-"),
    "postmortem-divergence": ("postmortem", f"{RUNS}/divergence-grad-norm/run.jsonl", "-o", "-"),
    "postmortem-nan-fp16": ("postmortem", f"{RUNS}/nan-fp16-overflow/run.jsonl", "-o", "-"),
    "postmortem-loss-scale": ("postmortem", f"{RUNS}/loss-scale-collapsed/run.jsonl", "-o", "-"),
    "postmortem-healthy": ("postmortem", f"{RUNS}/healthy-low-noise/run.jsonl", "-o", "-"),
    "postmortem-rank-outlier": ("postmortem", f"{RANKS}/seed_64", "-o", "-"),
    "postmortem-threshold-set": (
        "postmortem",
        f"{RUNS}/spike-long-tail/run.jsonl",
        "--set",
        "spike_sigma=4",
        "-o",
        "-",
    ),
    "postmortem-missing-file": ("postmortem", f"{RUNS}/no-such-run/run.jsonl", "-o", "-"),
    # explain: the list, a rule, a finding code, a verdict, a question, the thresholds (at
    # their defaults and with one set), the questions, an unknown code
    "explain-list": ("explain",),
    "explain-rule-spike": ("explain", "spike"),
    "explain-finding-fp16-overflow": ("explain", "fp16-overflow"),
    "explain-verdict-spike-recoverable": ("explain", "spike-recoverable"),
    "explain-question": ("explain", "Q2.1"),
    "explain-thresholds": ("explain", "thresholds"),
    "explain-thresholds-set": ("explain", "thresholds", "--set", "spike_sigma=4"),
    "explain-questions": ("explain", "questions"),
    "explain-unknown": ("explain", "no-such-code"),
}


# the post-mortem's heading carries the day it was written
_HEADING_DATE = re.compile(r"(?m)^(# .*post-mortem — )\d{4}-\d{2}-\d{2}( — )")


def _scrubbed(text: str) -> str:
    """`_text` of test_snapshots (the repository's path, the version), and the post-mortem's
    date."""
    return _HEADING_DATE.sub(r"\1<today>\2", _text(text))


def _session(args: tuple[str, ...]) -> str:
    """One case as ruff's CLI snapshots show it: arguments, exit status, stdout, stderr."""
    code, stdout, stderr = _run(*args)
    return "\n".join(
        [
            f"args: stab {shlex.join(args)}",
            f"exit_code: {code}",
            "----- stdout -----",
            _scrubbed(stdout),
            "----- stderr -----",
            _scrubbed(stderr),
        ]
    )


@pytest.mark.parametrize("case", CASES)
def test_command_output(case: str, snapshot) -> None:
    assert _session(CASES[case]) == snapshot


def test_only_the_post_mortem_heading_date_is_scrubbed() -> None:
    heading = "# Loss spike post-mortem — 2026-12-04 — spike-long-tail\nstep 2026-12-04\n"
    assert _scrubbed(heading) == (
        "# Loss spike post-mortem — <today> — spike-long-tail\nstep 2026-12-04\n"
    )
