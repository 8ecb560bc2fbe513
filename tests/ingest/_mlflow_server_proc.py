"""Start a real `mlflow server` on 127.0.0.1 for the REST reader tests, and always stop it.

Every wait is bounded: the server gets `START_TIMEOUT_S` to answer `/health`,
and shutdown escalates from SIGTERM to SIGKILL on the whole process group
(uvicorn and its workers included).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def mlflow_server(workdir: Path):
    """Yield the base URL of a fresh server backed by `workdir/mlflow.db`."""
    from tests._mlflow_store import new_sqlite_store

    # the new, empty store the server would create, without its ~10 s of migrations
    backend_uri = new_sqlite_store(workdir / "mlflow.db", workdir / "artifacts")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "server.log"
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        backend_uri,
        "--default-artifact-root",
        str(workdir / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mlflow server exited with {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mlflow server did not answer /health within {START_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.1)  # a short poll: the server is up the moment it answers
        yield url
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
            # the group may outlive its leader for a moment: make sure it is gone
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue
