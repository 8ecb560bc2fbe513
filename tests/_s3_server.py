"""A real S3 API on loopback for the object-store tests: moto's server in a child process.

`auth=True` starts it with request signing checked against its own IAM (no
user exists, so every request is refused): the credentials-error case.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "stab-test",
    "AWS_SECRET_ACCESS_KEY": "stab-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def s3_server(auth: bool = False) -> Iterator[str]:
    """The endpoint URL (http://127.0.0.1:PORT) of a fresh server, stopped on exit."""
    port = _free_port()
    env = dict(os.environ, **CREDENTIALS)
    if auth:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)
