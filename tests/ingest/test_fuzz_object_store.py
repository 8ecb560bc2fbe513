"""Seeded fuzzing of object-store listings (issue 33, item 6): random keys made of hostile
parts (`..`, `.`, empty, absolute, names that are also folders, long, odd characters)
under a prefix on a local S3 server, each prefix then read as one run and swept.

Every answer is a read run or one input / usage error; nothing is ever created outside
the private staging folder, which is gone afterwards."""

from __future__ import annotations

import random
import signal
import tempfile
from pathlib import Path

import pytest

from stabilitycli.core.errors import StabInputError, StabUsageError
from stabilitycli.ingest import read, remote
from stabilitycli.ingest.limits import InputLimits
from stabilitycli.ingest.options import ReadOptions
from tests._s3_server import CREDENTIALS, s3_server
from tests.conftest import run_fixture

pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

SEED = 33
BUCKET = "fuzz"
LISTINGS = 24
LOG = run_fixture("plateau").read_bytes()
PARTS = ("..", ".", "", "run.jsonl", "a", "b", "x" * 300, "sp ace", "é", "%2e%2e", "\\..", "~")


def _key(rng: random.Random, prefix: str, victim: Path) -> str:
    if rng.random() < 0.15:  # climbs out of the staging folder into `victim`
        return prefix + "../" * rng.randint(1, 30) + str(victim).lstrip("/") + "/o.jsonl"
    parts = [rng.choice(PARTS) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.6:
        parts.append("run.jsonl")
    return prefix + "/".join(parts)


@pytest.fixture(scope="module")
def listings(tmp_path_factory):
    """(endpoint, the victim folder, the prefixes), each prefix holding random keys."""
    victim = tmp_path_factory.mktemp("victim")
    rng = random.Random(SEED)
    with s3_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket=BUCKET)
        prefixes = []
        for number in range(LISTINGS):
            prefix = f"p{number}/"
            keys = {_key(rng, prefix, victim) for _ in range(rng.randint(1, 5))}
            if rng.random() < 0.5:
                keys.add(prefix + "good/run.jsonl")
            for key in keys:
                client.put_object(Bucket=BUCKET, Key=key, Body=LOG)
            prefixes.append(f"s3://{BUCKET}/{prefix}")
        yield endpoint, victim, prefixes


def _staging_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("stab-remote-*")}


def test_random_listings_never_write_outside_the_staging_folder(
    listings, tmp_path, monkeypatch
) -> None:
    endpoint, victim, prefixes = listings
    # a temp folder of its own: other workers' remote tests stage in the shared one meanwhile
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own_tmp))
    staged_before = _staging_folders()

    def late(signum, frame):
        raise TimeoutError("an object-store listing took over 120 s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(120)
    try:
        for prefix in prefixes:
            warned: list[str] = []
            try:
                with remote.staged(prefix, InputLimits(), endpoint, warned.append) as local:
                    root = Path(str(local).split("/stab-remote-")[0]).resolve()
                    for entry in local.rglob("*"):
                        assert entry.resolve().is_relative_to(root), entry
            except StabInputError:
                pass
            try:
                run = read(prefix, ReadOptions(endpoint_url=endpoint))
            except (StabInputError, StabUsageError):
                continue
            assert run.source.path == prefix.rstrip("/")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert list(victim.rglob("*")) == [], "an object was written outside the staging folder"
    assert _staging_folders() == staged_before, "a staging folder was left behind"


def test_a_sweep_of_every_random_listing_answers_in_lines(listings, cli) -> None:
    endpoint, victim, _ = listings
    result = cli("analyze", f"s3://{BUCKET}/", "-r", "--endpoint-url", endpoint, "-q")
    assert result.exit_code in (0, 1, 2)
    assert "internal error" not in result.stderr
    assert "left out" in result.stderr  # the seed makes hostile keys: each one said
    assert list(victim.rglob("*")) == []
