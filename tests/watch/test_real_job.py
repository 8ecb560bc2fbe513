"""A real training process watched from outside: `stab watch --stop-pid` stops it once its
loss spike is decided persistent, and standard input closing ends the watch with the exit
status of `stab analyze`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.conftest import ROOT

# one step of a small numpy training loop, linear regression by SGD: at SPIKE_AT its data
# go bad (labels scaled up) and stay bad, so the loss jumps and stays up
SGD_STEP = """x = rng.normal(size=(64, 16))
y = x @ w_true + rng.normal(scale=0.1, size=64)
if step >= spike_at:
    y = y * 4.0
err = x @ w - y
loss = float(np.mean(err**2))
w -= 0.002 * (x.T @ err) / 64
"""


def with_sgd_step(script: str) -> str:
    """The trainer `script` with its `SGD_STEP` line replaced by the step, indented as it."""
    indent = script.split("SGD_STEP")[0].rsplit("\n", 1)[1]
    return script.replace(indent + "SGD_STEP\n", textwrap.indent(SGD_STEP, indent))


# the training loop writing one JSON line a step
TRAINER = with_sgd_step(r"""
import json, signal, sys, time
import numpy as np

log, steps, spike_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stopped = []
signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
rng = np.random.default_rng(0)
w_true = rng.normal(size=16)
w = np.zeros(16)
with open(log, "a", buffering=1) as out:
    for step in range(steps):
        if stopped:
            print(json.dumps({"stopped_after_step": step - 1}), flush=True)
            sys.exit(0)
        SGD_STEP
        out.write(json.dumps({"step": step, "loss": loss, "lr": 0.002}) + "\n")
        time.sleep(0.01)
print(json.dumps({"stopped_after_step": None}), flush=True)
""")

SPIKE_AT = 400
RECOVERY_WINDOW_STEPS = 50  # the default recovery_window_steps: when a spike settles
# stated latency: the window, then at most two polls of 0.25 s at about 100 steps/s (the
# poll that completes the window, the one that judges it) and the judgment itself
LATENCY_STEPS = 120


def _stab(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "stabilitycli", *args], env=env, cwd=ROOT, **kwargs
    )


def watch_job(tmp_path: Path, job: subprocess.Popen, target: str, *extra: str):
    """`stab watch TARGET --stop-pid` beside a trainer that injects a persistent spike at
    SPIKE_AT and prints the step it stopped after: checks the job stopped within
    LATENCY_STEPS of the spike's settling, and the alerts; (exit status, stdout, stderr)."""
    alerts = tmp_path / "alerts.jsonl"
    watch = _stab(
        "watch", target, "--stop-pid", str(job.pid), "--interval", "0.25", "--cpu-share", "0.5",
        "--format", "json", "--alerts", str(alerts), *extra,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        job_out, _ = job.communicate(timeout=180)
        out, err = watch.communicate(timeout=180)
    finally:
        for process in (job, watch):
            if process.poll() is None:
                process.kill()
    stopped = json.loads(job_out.strip().splitlines()[-1])["stopped_after_step"]
    assert stopped is not None, f"the job ran to its end; stab watch said:\n{err}"
    decided = SPIKE_AT + RECOVERY_WINDOW_STEPS
    assert decided <= stopped <= decided + LATENCY_STEPS, (stopped, err)
    spike = [a for a in map(json.loads, alerts.read_text().splitlines()) if a["code"] == "spike"]
    assert spike[0]["status"] == "pending" and spike[-1]["status"] == "persistent"
    assert spike[0]["step"] >= SPIKE_AT  # never before the event
    assert "sent SIGTERM to process" in err and "Traceback" not in err
    return watch.returncode, out, err


def test_stop_pid_stops_the_job_after_a_persistent_spike(tmp_path: Path) -> None:
    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    job = subprocess.Popen(
        [sys.executable, str(script), str(log), "5000", str(SPIKE_AT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    while not log.exists():
        time.sleep(0.05)
    code, out, _ = watch_job(tmp_path, job, str(log), "--idle", "3")
    assert code == 1  # analyze's status on the final log: an error was found
    assert json.loads(out)["verdict"]["code"] == "spike-persistent"


def test_stdin_closed_ends_the_watch_with_analyze_status(tmp_path: Path) -> None:
    from tests.watch._runs import jsonl_lines

    data = jsonl_lines(0, 700, spike_at=600, stays=True)
    reader, writer = os.pipe()
    watch = _stab(
        "watch", "-", "--interval", "0.1", "--format", "json",
        stdin=reader, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(reader)
    with os.fdopen(writer, "wb") as pipe:
        for i in range(0, len(data), 7919):  # cuts lines in half, as a pipe does
            pipe.write(data[i : i + 7919])
            pipe.flush()
            time.sleep(0.01)
    out, err = watch.communicate(timeout=120)
    analyze = subprocess.run(
        [sys.executable, "-m", "stabilitycli", "analyze", "-", "--format", "json"],
        input=data, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
    )  # fmt: skip
    assert b"standard input closed" in err and b"Traceback" not in err
    assert watch.returncode == analyze.returncode == 1
    lines = out.decode().splitlines()
    alerts = [json.loads(line) for line in lines if line.startswith('{"type"')]
    assert any(a["code"] == "spike" for a in alerts)
    document = out.decode()[out.decode().index('{\n  "schema"') :]
    assert document == analyze.stdout.decode()


def test_ctrl_c_ends_the_watch_with_the_verdict(tmp_path: Path) -> None:
    import threading

    from tests.watch._runs import jsonl_lines

    log = tmp_path / "job" / "metrics.jsonl"
    log.parent.mkdir()
    log.write_bytes(jsonl_lines(0, 300))
    watch = _stab(
        "watch", str(log), "--interval", "0.1", "-q",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a shell's background job ignores SIGINT, and its children inherit that: undo it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    said: list[str] = []
    watching = threading.Event()

    def read_stderr() -> None:
        assert watch.stderr is not None
        for line in watch.stderr:
            said.append(line)
            if "watching" in line:
                watching.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert watching.wait(timeout=60), said
    watch.send_signal(signal.SIGINT)
    assert watch.stdout is not None
    out = watch.stdout.read()
    watch.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(said)
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err, (watch.returncode, err)
    assert out.startswith("healthy") and watch.returncode == 0
