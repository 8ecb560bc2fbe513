"""A bucket is not trusted to say where stab writes (issue 33, item 1): keys with `..`,
empty parts, or a name that is also a folder of other keys are left out of the private
copy with a warning naming the key, and nothing is created outside that copy."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from stabilitycli import analyze
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from tests._s3_server import CREDENTIALS, s3_server
from tests.conftest import RUNS

pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "hostile"
STAB = (sys.executable, "-m", "stabilitycli")
GOOD = (RUNS / "spike-persistent" / "run.jsonl").read_bytes()


def _escape(prefix: str, victim: Path) -> str:
    """A key below `prefix` that climbs out of any folder and lands in `victim`."""
    return prefix + "../" * 30 + str(victim).lstrip("/") + "/escaped/PWNED.jsonl"


@pytest.fixture(scope="module")
def victim(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("victim")


@pytest.fixture(scope="module")
def store(victim):
    with s3_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        keys = [
            "runs/good/run.jsonl",
            _escape("runs/a/", victim),
            "runs/b//run.jsonl",
            "runs/c/run.jsonl",
            "runs/c/run.jsonl/more.jsonl",
            "mixed/run.jsonl",
            _escape("mixed/", victim),
            _escape("only/", victim),
        ]
        for key in keys:
            client.put_object(Bucket=BUCKET, Key=key, Body=GOOD)
        # the listing really holds the hostile keys as written
        listed = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
        assert set(keys) == listed
        yield endpoint


def _untouched(victim: Path) -> None:
    assert list(victim.iterdir()) == [], "something was written outside the staging folder"


def test_a_sweep_of_a_hostile_prefix_writes_nothing_outside(store, victim, cli) -> None:
    result = cli("analyze", f"s3://{BUCKET}/runs", "-r", "--endpoint-url", store, "-q")
    _untouched(victim)
    warnings = [line for line in result.stderr.splitlines() if "left out" in line]
    assert len(warnings) == 3, result.stderr
    assert any("../../" in w and "`..`" in w for w in warnings)
    assert any("runs/b//run.jsonl" in w and "empty" in w for w in warnings)
    assert any("runs/c/run.jsonl'" in w and "also a folder" in w for w in warnings)
    # the plain runs are still analysed: the good one and c/run.jsonl/more.jsonl
    assert result.exit_code == 1  # spike-persistent's finding is error-level
    assert "internal error" not in result.stderr


def test_a_run_read_from_a_prefix_says_which_key_it_left_out(store, victim) -> None:
    result = analyze(f"s3://{BUCKET}/mixed", options=ReadOptions(endpoint_url=store))
    _untouched(victim)
    warnings = json.dumps(result.to_dict()["source"]["warnings"])
    assert "left out" in warnings and "PWNED.jsonl" in warnings


def test_a_prefix_of_only_hostile_keys_is_one_input_error(store, victim) -> None:
    with pytest.raises(StabInputError) as err:
        analyze(f"s3://{BUCKET}/only", options=ReadOptions(endpoint_url=store))
    _untouched(victim)
    assert "left out" in str(err.value)


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        (f"s3://{BUCKET}//runs/good/run.jsonl", "empty, `.` or `..` part"),
        (f"s3://{BUCKET}/runs/../runs/good/run.jsonl", "empty, `.` or `..` part"),
        (f"s3://stab:sekrit@{BUCKET}/runs/good/run.jsonl", "credentials in an object-store URI"),
    ],
)
def test_a_malformed_object_uri_is_a_usage_error(store, cli, uri, said) -> None:
    result = cli("analyze", uri, "--endpoint-url", store)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and said in lines[0], result.stderr
    assert "sekrit" not in result.stderr


@contextmanager
def _trickling(endpoint: str) -> Iterator[str]:
    """A proxy in front of `endpoint` that passes small answers at once and sends every
    large one (an object's body) 16 bytes at a time, 320 bytes a second: never silent,
    so no socket timeout ever fires."""
    upstream = urlsplit(endpoint)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def pipe(source: socket.socket, sink: socket.socket, slow: bool) -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set() and (data := source.recv(65536)):
                if not slow or len(data) <= 4096:
                    sink.sendall(data)
                    continue
                for start in range(0, len(data), 16):
                    if stop.wait(0.05):
                        return
                    sink.sendall(data[start : start + 16])

    def accept() -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                client, _ = listener.accept()
                server = socket.create_connection((upstream.hostname, upstream.port))
                threading.Thread(target=pipe, args=(client, server, False), daemon=True).start()
                threading.Thread(target=pipe, args=(server, client, True), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def test_a_store_that_trickles_an_object_is_cut_at_the_request_deadline(store, tmp_path) -> None:
    client = boto3.client("s3", endpoint_url=store)
    client.put_object(Bucket=BUCKET, Key="slow/run.jsonl", Body=GOOD * 4)
    assert len(GOOD) * 4 > 32_000  # minutes at 320 bytes a second
    env = {
        **os.environ,
        **CREDENTIALS,
        "PYTHONPATH": str(ROOT),
        "STAB_LIMIT_SERVER_REQUEST_SECONDS": "2",
        "STAB_LIMIT_SERVER_TOTAL_SECONDS": "6",
    }
    with _trickling(store) as slow:
        started = time.monotonic()
        result = subprocess.run(
            [*STAB, "analyze", f"s3://{BUCKET}/slow/run.jsonl", "--endpoint-url", slow],
            capture_output=True,
            text=True,
            timeout=40,
            env=env,
        )
        took_seconds = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert "the store did not answer in time" in result.stderr
    assert "server_request_seconds = 2" in result.stderr
    assert took_seconds < 20, took_seconds  # the deadline, the start-up and the exit


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        ("file://", "no path in the file URI"),
        ("file://elsewhere/run.jsonl", "a file URI on another host is not read"),
    ],
)
@pytest.mark.parametrize("recursive", [False, True])
def test_a_file_uri_without_a_local_path_is_a_usage_error(
    cli, tmp_path, monkeypatch, uri, said, recursive
) -> None:
    (tmp_path / "run.jsonl").write_bytes(GOOD)  # `file://` once read the working folder
    monkeypatch.chdir(tmp_path)
    result = cli("analyze", *(["-r"] if recursive else []), uri)
    assert result.exit_code == 2
    assert result.stderr.strip() == f"stab: error: {uri}: {said} (file:///PATH)"
