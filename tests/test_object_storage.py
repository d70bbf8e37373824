"""Everything a pipeline writes and reads on an object store (a real S3 server,
S3Proxy, started by the tests): traces, sources, sinks, the tick's lease and
records, equal to the same pipeline on a local disk, and nothing written on the
local disk but Spark's scratch space."""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.lake import Location, StoreOptions
from dd_etl.lake.lease import Lease, LeaseHeld
from dd_etl.lattice import Antichain
from dd_etl.pipeline.config import load_config
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.maintenance import find_traces
from tests.support.cluster_pipelines import JOIN_VIEWS, cli, join_pipeline
from tests.support.faulty_proxy import Fault, proxying
from tests.support.kv_trace import SCHEMA, contents, frame
from tests.support.pipeline_fixtures import bag, change_data
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.spark

KEY_ENV, SECRET_ENV = "DD_ETL_TEST_S3_KEY", "DD_ETL_TEST_S3_SECRET"


def location(server: S3Server, path: str) -> Location:
    return Location.of(f"s3://{server.bucket()}/{path}", StoreOptions.of(server.storage_options()))


def test_a_trace_on_s3_takes_appends_merges_and_vacuums(
    spark: SparkSession, s3_server: S3Server, tmp_path: Path
) -> None:
    root = location(s3_server, "traces")
    where = root / "t"
    where.configure(spark)
    traces = [
        DeltaTrace.create(spark, w, "t", SCHEMA, ["k"], rows_per_file=4)
        for w in (where, Location.of(tmp_path / "t"))
    ]
    for trace in traces:
        reader = trace.open_reader("r")
        for epoch in range(4):
            rows = [((k, f"v{epoch}"), (epoch,), 1 if k % 3 else -1) for k in range(epoch * 6)]
            trace.compare_and_append(frame(spark, rows), e(epoch), e(epoch + 1))
        reader.downgrade(e(3), e(3))
        trace.exert(None)
        trace.vacuum(retention_hours=0)
    on_s3, local = traces
    assert on_s3.state.batches and len(on_s3.state.batches) == len(local.state.batches)
    for t in range(3, 5):
        assert contents(on_s3.read_at((t,))) == contents(local.read_at((t,)))
    assert on_s3.size() == local.size()
    reopened = DeltaTrace(spark, where)  # from the store alone
    assert reopened.state == on_s3.state
    assert list(find_traces(root)) == [where]


def e(epoch: int) -> Antichain:
    return Antichain.from_epoch(epoch)


def s3_pipeline(directory: Path, server: S3Server, bucket: str) -> Path:
    """``join_pipeline`` with its warehouse, sources and sinks in ``bucket``, its
    credentials from the environment."""
    local = join_pipeline(directory, "data")
    text = local.read_text()
    text = text.replace("warehouse: warehouse", f"warehouse: s3://{bucket}/warehouse")
    text = text.replace("path: data/", f"path: s3a://{bucket}/data/")
    text = text.replace("path: out/", f"path: s3://{bucket}/out/")
    options = {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_REGION": server.region,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": f"${{{KEY_ENV}}}",
        "AWS_SECRET_ACCESS_KEY": f"${{{SECRET_ENV}}}",
    }
    text += "storage_options:\n" + "".join(f"  {k}: '{v}'\n" for k, v in options.items())
    local.write_text(text)
    return local


def upload(source: Path, server: S3Server, bucket: str) -> None:
    """The source data written locally, copied to the bucket as it is now."""
    s3 = pafs.S3FileSystem(**StoreOptions.of(server.storage_options()).pyarrow_s3())
    pafs.copy_files(str(source), f"{bucket}/data", destination_filesystem=s3)


def outcome(pipeline: Path, epochs: int, sinks: dict[str, Location]) -> dict[str, Any]:
    found: dict[str, Any] = {
        f"{view}@{epoch}": bag(
            json.loads(cli("read", str(pipeline), view, "--format", "json", "--as-of", str(epoch)))
        )
        for view in JOIN_VIEWS
        for epoch in range(epochs)
    }
    for name, where in sinks.items():
        table = DeltaTable(where.uri, storage_options=where.delta_options)
        found[name] = bag(table.to_pyarrow_table().to_pylist())
        found[f"{name} commits"] = [
            h["dd_etl.epoch"] for h in reversed(table.history()) if "dd_etl.epoch" in h
        ]
    status = json.loads(cli("status", str(pipeline), "--json"))
    found["last tick"] = status["last_tick"]["epoch"]
    return found


def test_a_pipeline_on_s3_equals_the_same_pipeline_on_a_local_disk(
    spark: SparkSession, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, s3_server.secret_key)
    bucket = s3_server.bucket()
    data = tmp_path / "data"
    local = join_pipeline(tmp_path / "local", "../data")
    remote = s3_pipeline(tmp_path / "remote", s3_server, bucket)
    epochs = 2  # a load, and an epoch of inserts, updates and deletes
    for epoch in range(epochs):
        change_data(tmp_path, epoch)
        upload(data, s3_server, bucket)
        cli("run", str(local))
        cli("run", str(remote))
    options = load_config(remote).locations()[0].options
    sinks = {
        "boroughs": "out/boroughs",
        "boroughs_changes": "out/boroughs_changes",
    }
    expected = outcome(
        local, epochs, {k: Location.of(tmp_path / "local" / v) for k, v in sinks.items()}
    )
    got = outcome(
        remote, epochs, {k: Location.of(f"s3://{bucket}/{v}", options) for k, v in sinks.items()}
    )
    assert got == expected
    assert expected["boroughs commits"] == [str(e) for e in range(epochs)]
    # nothing on the local disk: the remote pipeline's directory holds its file alone
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == ["pipeline.yaml"]
    listed = Counter(p.split("/")[0] for p in _keys(s3_server, bucket))
    assert set(listed) == {"data", "out", "warehouse"}


def _keys(server: S3Server, bucket: str) -> list[str]:
    s3 = pafs.S3FileSystem(**StoreOptions.of(server.storage_options()).pyarrow_s3())
    found = s3.get_file_info(pafs.FileSelector(bucket, recursive=True))
    return [f.path.removeprefix(f"{bucket}/") for f in found if f.type == pafs.FileType.File]


def run(pipeline: Path, code: int = 0) -> str:
    """``dd-etl run`` in this process: its standard error, the exit status checked."""
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == code, (result.stdout, result.stderr)
    return result.stderr


def _warehouse_keys(server: S3Server, bucket: str) -> list[str]:
    return [k for k in _keys(server, bucket) if k.startswith("warehouse/")]


@pytest.mark.parametrize("wrong", ["bucket", "secret", "endpoint", "conditional writes"])
def test_a_store_that_says_no_is_one_error_naming_it_and_nothing_is_committed(
    spark: SparkSession,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wrong: str,
) -> None:
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, s3_server.secret_key)
    bucket = s3_server.bucket()
    change_data(tmp_path, 0)
    upload(tmp_path / "data", s3_server, bucket)
    with proxying(s3_server.endpoint) as proxy:
        pipeline = s3_pipeline(tmp_path / "remote", s3_server, bucket)
        text = pipeline.read_text()
        if wrong == "bucket":
            text = text.replace(f"warehouse: s3://{bucket}/", "warehouse: s3://no-such-bucket/")
            said = "has no bucket 'no-such-bucket': create it"
        elif wrong == "secret":
            monkeypatch.setenv(SECRET_ENV, "not-the-secret")
            said = "refused the credentials given: check AWS_ACCESS_KEY_ID"
        elif wrong == "endpoint":
            text = text.replace(s3_server.endpoint, "http://127.0.0.1:1")
            said = "does not answer at http://127.0.0.1:1: check AWS_ENDPOINT_URL"
        else:
            text = text.replace(s3_server.endpoint, proxy.endpoint)
            proxy.faults.append(Fault("no_conditions", method="PUT", times=-1))
            said = "does not support conditional writes"
        pipeline.write_text(text)
        error = run(pipeline, code=5)
    assert said in error and "the object store at s3://" in error
    assert len(error.strip().splitlines()) == 1
    assert _warehouse_keys(s3_server, bucket) in ([], ["warehouse/_pipeline/probes"])
    assert not [k for k in _warehouse_keys(s3_server, bucket) if "_delta_log" in k]


def test_racing_for_the_lease_one_process_wins(s3_server: S3Server) -> None:
    where = location(s3_server, "_pipeline/tick.lease")
    leases = [Lease(where, holder=f"racer {i}") for i in range(8)]

    def take(lease: Lease) -> bool:
        try:
            lease.acquire()
        except LeaseHeld:
            return False
        return True

    with ThreadPoolExecutor(len(leases)) as pool:
        won = list(pool.map(take, leases))
    assert won.count(True) == 1
    winner = leases[won.index(True)]
    current = winner.current()
    assert current is not None and current.holder == winner.holder
