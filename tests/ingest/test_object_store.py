"""Logs read from an object store (issue 13, item 1): the same runs from local disk and
from a real S3 API on loopback (moto's server) give the same documents, NaN and Inf
included; a missing key, a missing bucket and refused credentials are one line and
exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stabilitycli import analyze, ranks
from stabilitycli.core.errors import StabInputError
from stabilitycli.ingest.options import ReadOptions
from tests._s3_server import CREDENTIALS, s3_server
from tests.conftest import FIXTURES, RUNS

pytest.importorskip("moto")

# the tests that start moto's S3 server (`store` for the module, or one of their own): the
# server takes ~3 s to answer
s3_server_start = pytest.mark.slow

BUCKET = "stab-logs"
# (what is uploaded, the part of the URI after the bucket): single logs, a gzip log, a log
# with a manifest beside it, a TensorBoard folder, a per-rank folder
CASES = [
    (RUNS / "spike-persistent" / "run.jsonl", "runs/spike-persistent/run.jsonl"),
    (RUNS / "nan-fp32-origin" / "run.jsonl", "runs/nan-fp32-origin/run.jsonl"),
    (RUNS / "nan-tokens-gz" / "run.jsonl.gz", "runs/nan-tokens-gz/run.jsonl.gz"),
    (FIXTURES / "tensorboard" / "tf2", "tb/tf2"),
    (FIXTURES / "ranks" / "seed_64", "ranks/seed_64"),
    # every other kind of file reader: tables, trainer stdout, HF and Lightning folders,
    # an MLflow file-store run
    (FIXTURES / "tabular" / "metrics.parquet", "tabular/metrics.parquet"),
    (FIXTURES / "tabular" / "metrics.csv", "tabular/metrics.csv"),
    (FIXTURES / "megatron" / "gpt_fp16.log", "megatron/gpt_fp16.log"),
    (FIXTURES / "hf_trainer" / "output", "hf/output"),
    (FIXTURES / "lightning" / "lightning_logs", "lightning/lightning_logs"),
    (
        FIXTURES / "mlflow" / "mlruns" / "556065440756874542" / "10cdce98d890499baa11f68c17381f1b",
        "mlflow/10cdce98d890499baa11f68c17381f1b",
    ),
]


# runs under one prefix, for `--recursive s3://...`: unhealthy, healthy, NaN
SWEEP = ("spike-persistent", "healthy-every-10", "nan-fp32-origin")


@pytest.fixture(scope="module")
def store():
    """An S3 endpoint holding CASES (and the manifest beside nan-fp32-origin's log)."""
    import pyarrow.fs as pafs

    with s3_server() as endpoint, pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        fs = pafs.S3FileSystem(
            endpoint_override=endpoint.removeprefix("http://"),
            scheme="http",
            region=CREDENTIALS["AWS_DEFAULT_REGION"],
            allow_bucket_creation=True,
        )
        fs.create_dir(BUCKET)
        uploads = [(local, key) for local, key in CASES]
        uploads.append(
            (RUNS / "nan-fp32-origin" / "manifest.json", "runs/nan-fp32-origin/manifest.json")
        )
        uploads += [(RUNS / name / "run.jsonl", f"sweep/{name}/run.jsonl") for name in SWEEP]
        for local, key in uploads:
            files = (
                [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
            )
            for file in files:
                name = key if local.is_file() else f"{key}/{file.relative_to(local).as_posix()}"
                with fs.open_output_stream(f"{BUCKET}/{name}") as out:
                    out.write(file.read_bytes())
        yield endpoint


def _document(result, local: Path, uri: str) -> str:
    """The analysis as JSON, the local path written as the URI (the one place they differ)."""
    return json.dumps(result.to_dict(), sort_keys=True).replace(str(local), uri)


@s3_server_start
@pytest.mark.parametrize("local,key", CASES, ids=[key for _, key in CASES])
def test_a_run_in_the_store_reads_as_the_same_run_on_disk(store, tmp_path, local, key) -> None:
    # a copy under the folder name the store has, since readers name a run by its folder
    copy = tmp_path / Path(key).parent.name / Path(key).name
    copy.parent.mkdir(parents=True)
    if local.is_file():
        shutil.copy(local, copy)
        beside = local.parent / "manifest.json"
        if beside.is_file():
            shutil.copy(beside, copy.parent / beside.name)
    else:
        shutil.copytree(local, copy)
    uri = f"s3://{BUCKET}/{key}"
    options = ReadOptions(endpoint_url=store)
    from_store = analyze(uri, options=options)
    from_disk = analyze(copy, options=options)
    # a folder's reader may name the file it read inside it (HF's trainer_state.json)
    assert from_store.source.path.startswith(uri)
    assert _document(from_store, copy, uri) == _document(from_disk, copy, uri)


@s3_server_start
def test_nan_and_inf_come_through_the_store_exactly(store) -> None:
    from stabilitycli import read

    run = read(f"s3://{BUCKET}/runs/nan-tokens-gz/run.jsonl.gz", ReadOptions(endpoint_url=store))
    on_disk = read(RUNS / "nan-tokens-gz" / "run.jsonl.gz")
    loss, expected = run.frame["loss"].to_list(), on_disk.frame["loss"].to_list()
    assert any(v != v for v in expected)  # the fixture holds NaN
    assert [repr(v) for v in loss] == [repr(v) for v in expected]


@s3_server_start
def test_ranks_read_a_per_rank_folder_in_the_store(store) -> None:
    report = ranks(f"s3://{BUCKET}/ranks/seed_64", options=ReadOptions(endpoint_url=store))
    on_disk = ranks(FIXTURES / "ranks" / "seed_64")
    assert [o.rank for o in report.outliers] == [o.rank for o in on_disk.outliers]
    assert report.outliers


@s3_server_start
@pytest.mark.parametrize(
    "uri,reason",
    [
        (f"s3://{BUCKET}/runs/no-such-run/run.jsonl", "no such object or prefix"),
        ("s3://no-such-bucket/run.jsonl", "no such object or prefix"),
    ],
)
def test_a_missing_key_or_bucket_is_one_line_and_exit_2(store, cli, uri, reason) -> None:
    result = cli("analyze", uri, "--endpoint-url", store)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and uri in lines[0] and reason in lines[0]


@s3_server_start
def test_refused_credentials_are_one_line_and_exit_2(cli, monkeypatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with s3_server(auth=True) as endpoint:
        result = cli("analyze", f"s3://{BUCKET}/runs/run.jsonl", "--endpoint-url", endpoint)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "the object store refused" in lines[0] and "ACCESS_DENIED" in lines[0]


@s3_server_start
def test_the_cli_reads_a_log_in_the_store(store, cli) -> None:
    uri = f"s3://{BUCKET}/runs/spike-persistent/run.jsonl"
    result = cli("analyze", uri, "--endpoint-url", store, "--format", "json")
    document = json.loads(result.output)
    assert document["source"]["path"] == uri
    assert result.exit_code == 1  # the persistent spike is an error-level finding


def test_a_file_uri_is_the_local_path(tmp_path) -> None:
    log = RUNS / "spike-persistent" / "run.jsonl"
    by_uri = analyze(log.resolve().as_uri())
    assert by_uri.to_dict() == analyze(log.resolve()).to_dict()


@s3_server_start
def test_an_object_over_the_size_limit_is_refused_before_it_is_fetched(store, monkeypatch) -> None:
    monkeypatch.setenv("STAB_LIMIT_MAX_INPUT_BYTES", "1000")
    with pytest.raises(StabInputError) as err:
        analyze(
            f"s3://{BUCKET}/runs/spike-persistent/run.jsonl",
            options=ReadOptions(endpoint_url=store),
        )
    assert "max_input_bytes" in str(err.value)
    assert str(err.value).startswith(f"s3://{BUCKET}/runs/spike-persistent/run.jsonl")


@s3_server_start
def test_a_sweep_of_a_prefix_is_the_sweep_of_the_same_folder_on_disk(store, cli, tmp_path) -> None:
    folder = tmp_path / "sweep"
    for name in SWEEP:
        (folder / name).mkdir(parents=True)
        shutil.copy(RUNS / name / "run.jsonl", folder / name / "run.jsonl")
    uri = f"s3://{BUCKET}/sweep"
    remote = cli(
        "analyze", "--recursive", uri, "--endpoint-url", store, "--format", "json", "-j", "1"
    )
    local = cli("analyze", "--recursive", folder, "--format", "json", "-j", "1")
    assert remote.exit_code == local.exit_code == 1

    def documents(output: str) -> list[str]:
        return sorted(output.replace(str(folder), uri).strip().splitlines())

    got = documents(remote.output)
    assert len(got) == len(SWEEP)
    assert got == documents(local.output)
    assert all(json.loads(line)["source"]["path"].startswith(uri) for line in got)


def _s3(endpoint: str):
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        region=CREDENTIALS["AWS_DEFAULT_REGION"],
    )


@s3_server_start
def test_a_results_store_reanalyses_only_the_objects_that_changed(store, cli, tmp_path) -> None:
    fs = _s3(store)
    for name in SWEEP:
        with fs.open_output_stream(f"{BUCKET}/again/{name}/run.jsonl") as out:
            out.write((RUNS / name / "run.jsonl").read_bytes())
    uri, db = f"s3://{BUCKET}/again", tmp_path / "results.db"

    def sweep():
        return cli(
            "analyze",
            "-r",
            uri,
            "--endpoint-url",
            store,
            "--results",
            db,
            "-j",
            "1",
            "--format",
            "json",
        )

    first, second = sweep(), sweep()
    assert first.exit_code == second.exit_code == 1
    assert sorted(first.stdout.splitlines()) == sorted(second.stdout.splitlines())
    assert f"0 of {len(SWEEP)} runs reused" in first.output
    assert f"{len(SWEEP)} of {len(SWEEP)} runs reused" in second.output
    # one run rewritten in the store (now healthy): only it is fetched and analysed again
    with fs.open_output_stream(f"{BUCKET}/again/spike-persistent/run.jsonl") as out:
        out.write((RUNS / "plateau" / "run.jsonl").read_bytes())
    third = sweep()
    assert f"{len(SWEEP) - 1} of {len(SWEEP)} runs reused" in third.output
    paths = [json.loads(line)["source"]["path"] for line in third.stdout.splitlines()]
    assert sorted(paths) == sorted(f"{uri}/{name}/run.jsonl" for name in SWEEP)
