"""Everything a pipeline writes and reads on an object store (a real S3 server,
S3Proxy, started by the tests): traces, sources, sinks, the tick's lease and
records, equal to the same pipeline on a local disk, and nothing written on the
local disk but Spark's scratch space."""

from __future__ import annotations

import datetime
import signal
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.dagster import SparkResource, pipeline_definitions
from dd_etl.lake import Location, StoreOptions
from dd_etl.lake.lease import Lease, LeaseHeld
from dd_etl.lattice import Antichain
from dd_etl.pipeline.config import load_config
from dd_etl.sinks.delta_table import SinkTable, committed_epoch
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.maintenance import find_traces
from tests.support.child_process import dd_etl_process
from tests.support.cluster_pipelines import (
    JOIN_SINKS,
    JOIN_VIEWS,
    TAXI_VIEWS,
    cli,
    join_pipeline,
    outcome,
    taxi_generator,
    taxi_pipeline,
    view_at,
)
from tests.support.faulty_proxy import Fault, proxying
from tests.support.kv_trace import SCHEMA, contents, frame
from tests.support.pipeline_fixtures import bag, change_data
from tests.support.s3_pipelines import SECRET_ENV, credentials, keys, on_store, upload
from tests.support.s3_server import S3Server

pytestmark = pytest.mark.spark


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


def outcomes(
    local: Path, remote: Path, bucket: str, epochs: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the local pipeline left, and what the same pipeline on S3 left."""
    views = list(JOIN_VIEWS)
    on_s3 = {k: f"s3://{bucket}/{v}" for k, v in JOIN_SINKS.items()}
    return outcome(local, views, JOIN_SINKS, epochs), outcome(remote, views, on_s3, epochs)


def run(pipeline: Path, code: int = 0) -> str:
    """``dd-etl run`` in this process: its standard error, the exit status checked."""
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == code, (result.stdout, result.stderr, repr(result.exception))
    return result.stderr


def warehouse_keys(server: S3Server, bucket: str) -> list[str]:
    return [k for k in keys(server, bucket) if k.startswith("warehouse/")]


@pytest.mark.parametrize("wrong", ["bucket", "secret", "endpoint", "conditional writes"])
def test_a_store_that_says_no_is_one_error_naming_it_and_nothing_is_committed(
    spark: SparkSession,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wrong: str,
) -> None:
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    change_data(tmp_path, 0)
    upload(tmp_path / "data", s3_server, bucket)
    with proxying(s3_server.endpoint) as proxy:
        pipeline = on_store(join_pipeline(tmp_path / "remote", "data"), s3_server, bucket)
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
            proxy.inject(Fault("no_conditions", method="PUT", times=-1))
            said = "does not support conditional writes"
        pipeline.write_text(text)
        error = run(pipeline, code=5)
    assert said in error and "the object store at s3://" in error
    assert len(error.strip().splitlines()) == 1
    # no commit: at most the probe's key and the cache of the sources' schemas
    kept = {"warehouse/_pipeline/probes", "warehouse/_pipeline/schemas.json"}
    assert set(warehouse_keys(s3_server, bucket)) <= kept


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


# Each epoch's run goes through the proxy with these faults; a run either finishes
# or fails with the store named (status 5), and the run after it, without faults,
# converges.
FAULTS_BY_EPOCH = [
    # the load: logs slow to read, a trace's creation lands and its answer is lost
    [
        Fault("slow", method="GET", path="/_delta_log/", times=5, seconds=1.5),
        Fault("reset_after", method="PUT", path="/views/walks/_delta_log/0000000000000000000"),
    ],
    # the sink's writes refused twice (the client retries); a view's trace commit
    # lands, its answer is lost
    [
        Fault("503", method="PUT", path="/out/", times=2),
        Fault("reset_after", method="PUT", path="/warehouse/views/boroughs/_delta_log/"),
    ],
    # the tick's own record lands, its answer is lost
    [Fault("reset_after", method="PUT", path="/warehouse/_pipeline/last_tick.json")],
]


def test_a_pipeline_converges_through_resets_503s_and_slow_answers(
    spark: SparkSession, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    local = join_pipeline(tmp_path / "local", "../data")
    with proxying(s3_server.endpoint) as proxy:
        remote = join_pipeline(tmp_path / "remote", "data")
        on_store(remote, s3_server, bucket, endpoint=proxy.endpoint)
        for epoch, faults in enumerate(FAULTS_BY_EPOCH):
            change_data(tmp_path, epoch)
            upload(tmp_path / "data", s3_server, bucket)
            cli("run", str(local))
            proxy.inject(*faults)
            result = CliRunner().invoke(app, ["run", str(remote)])
            assert result.exit_code in (0, 5), (result.stdout, result.stderr)
            assert all(f.hits for f in proxy.faults()), proxy.faults()
            proxy.inject()
            if result.exit_code == 5:
                error = result.stderr.strip().splitlines()[-1]
                assert error.startswith("error: the object store at http://"), result.stderr
                assert "Connection reset by peer" in error and "run again" in error
                run(remote)  # converges: the epoch the failed run left is finished
        expected, got = outcomes(local, remote, bucket, len(FAULTS_BY_EPOCH))
    assert got == expected


# Each epoch's first run is killed (SIGKILL) at a failpoint; the next completes it.
CRASHES_BY_EPOCH = [
    "append.files_written=4",  # the load: batch files on the store, in no log yet
    "append.committed=3",  # some traces took the epoch, others not
    "sink.files_written=1",  # the table's files written, not committed
]


def test_runs_killed_or_racing_on_s3_commit_each_epoch_once(
    spark: SparkSession, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    local = join_pipeline(tmp_path / "local", "../data")
    remote = on_store(join_pipeline(tmp_path / "remote", "data"), s3_server, bucket)
    for epoch, failpoint in enumerate(CRASHES_BY_EPOCH):
        change_data(tmp_path, epoch)
        upload(tmp_path / "data", s3_server, bucket)
        cli("run", str(local))
        killed = dd_etl_process("run", str(remote), failpoints=failpoint)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        assert f"completed interrupted epoch {epoch}" in run(remote)

    # two processes racing for the next epoch, sharing nothing but the store: the
    # lease lets one tick at a time (the other says so, status 3, or ticks after)
    change_data(tmp_path, len(CRASHES_BY_EPOCH))
    upload(tmp_path / "data", s3_server, bucket)
    with ThreadPoolExecutor(2) as pool:
        racers = list(pool.map(lambda _: dd_etl_process("run", str(remote)), range(2)))
    codes = sorted(r.returncode for r in racers)
    assert codes in ([0, 0], [0, 3]), [r.stderr[-2000:] for r in racers]
    for refused in (r for r in racers if r.returncode == 3):
        assert "another tick of pipeline 'cluster_join' is running" in refused.stderr
    for _ in range(codes.count(0)):
        cli("run", str(local))

    epochs = len(CRASHES_BY_EPOCH) + codes.count(0)
    expected, got = outcomes(local, remote, bucket, epochs)
    assert got == expected
    assert got["boroughs commits"] == [str(e) for e in range(epochs)]
    # nothing on the local disk: the remote pipeline's directory holds its file alone
    assert sorted(p.name for p in remote.parent.iterdir()) == ["pipeline.yaml"]
    assert {k.split("/")[0] for k in keys(s3_server, bucket)} == {"data", "out", "warehouse"}


def test_dagster_ticks_backfills_and_audits_the_demo_on_s3(
    spark: SparkSession, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's code location with its warehouse, sources and sinks on S3: the
    tick schedule sees new data on the store, ticks run, a rebuild backfill and
    the audit's checks pass, every view equal to the demo on a local disk."""
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    generate = taxi_generator().generate
    remote = on_store(taxi_pipeline(tmp_path / "remote", "data"), s3_server, bucket)
    local = taxi_pipeline(tmp_path / "local", "../data")
    defs = pipeline_definitions([remote], spark=SparkResource(), tick_cron="0 * * * *")
    schedule = defs.resolve_schedule_def("taxi_tick_schedule")
    with dg.instance_for_test() as instance:

        def due() -> list[dg.RunRequest]:
            now = datetime.datetime.now(datetime.UTC)
            context = dg.build_schedule_context(instance, scheduled_execution_time=now)
            return list(schedule.evaluate_tick(context).run_requests or [])

        for epoch in range(2):
            generate(tmp_path / "data", epoch, 100)
            upload(tmp_path / "data", s3_server, bucket)
            (request,) = due()
            assert "has new data" in request.tags["dd_etl/reason"]
            tick = defs.resolve_job_def("taxi_tick").execute_in_process(
                instance=instance, tags=request.tags
            )
            assert tick.success and all(e.passed for e in tick.get_asset_check_evaluations())
            cli("run", str(local))
        assert due() == []  # nothing new on the store: the schedule skips

        config = {"ops": {"taxi_rebuild_op": {"config": {"views": ["trips_by_borough"]}}}}
        rebuilt = defs.resolve_job_def("taxi_rebuild").execute_in_process(
            instance=instance, run_config=config
        )
        assert rebuilt.output_for_node("taxi_rebuild_op") == ["trips_by_borough"]
        audit = defs.resolve_job_def("taxi_audit").execute_in_process(instance=instance)
        audited = audit.get_asset_check_evaluations()
        assert audited and all(e.passed for e in audited)
    for view in TAXI_VIEWS:
        assert view_at(remote, view, 1) == view_at(local, view, 1), view
    assert sorted(p.name for p in remote.parent.iterdir()) == ["pipeline.yaml"]


def downstream(directory: Path, bucket: str) -> Path:
    """A second pipeline whose source is the first's materialized table on S3."""
    directory.mkdir(parents=True)
    path = directory / "pipeline.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: downstream
            warehouse: s3://{bucket}/downstream
            spark: {{conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}}}
            sources:
              boroughs: {{format: delta, path: s3a://{bucket}/out/boroughs, key: [borough]}}
            views:
              busy: {{sql: "{CHAINED_SQL}"}}
            """
        )
    )
    return path


CHAINED_SQL = (
    "SELECT trips > 2 AS busy, COUNT(*) AS boroughs, SUM(pcs) AS pcs FROM boroughs GROUP BY 1"
)


def feed_of_epoch(table: Location, epoch: int) -> tuple[Counter[str], Counter[str]]:
    """The rows a sink table's change feed says its commit of ``epoch`` inserted
    and deleted."""
    opened = DeltaTable(table.uri, storage_options=table.delta_options)
    version = next(i["version"] for i in opened.history() if committed_epoch(i) == epoch)
    feed = opened.load_cdf(starting_version=version, ending_version=version)
    changes = [r for batch in feed for r in pa.table(batch).to_pylist()]
    kinds = [r.pop("_change_type") for r in changes]
    for r in changes:
        del r["_commit_version"], r["_commit_timestamp"]
    inserted = bag([r for r, k in zip(changes, kinds, strict=True) if k == "insert"])
    return inserted, bag([r for r, k in zip(changes, kinds, strict=True) if k == "delete"])


def test_a_pipeline_reads_anothers_table_on_s3_by_its_change_feed(
    spark: SparkSession, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first pipeline's materialized table has its change data feed on, of
    exactly its view's changes, whether the table is rewritten whole or (past
    ``store_rewrite_bytes``) takes the changes by a MERGE: the second takes each
    epoch's changes from it, and its view equals Spark SQL over the table as the
    first left it. A column the second does not read, renamed: no rebuild."""
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    first = on_store(join_pipeline(tmp_path / "first", "data"), s3_server, bucket)
    second = on_store(downstream(tmp_path / "second", bucket), s3_server, bucket)
    table = load_config(first).location("boroughs", f"s3://{bucket}/out/boroughs")
    table.configure(spark)
    for epoch in range(3):
        if epoch == 2:  # past store_rewrite_bytes: the table takes the view's changes
            with first.open("a") as file:
                file.write("sizing: {small_records: 0, store_rewrite_bytes: 0}\n")
        change_data(tmp_path, epoch)
        upload(tmp_path / "data", s3_server, bucket)
        cli("run", str(first))
        write = SinkTable(table, "cluster_join", "boroughs", "materialize").log()
        assert write is not None and (last := write.last_write()) is not None
        assert last.operation == ("MERGE" if epoch == 2 else "WRITE"), epoch
        said = run(second)
        assert "source:boroughs: " in said and "(diff)" not in said, said
        spark.read.format("delta").load(table.spark).createOrReplaceTempView("boroughs")
        expected = bag([r.asDict() for r in spark.sql(CHAINED_SQL).collect()])
        assert view_at(second, "busy", epoch) == expected, epoch
        if epoch:  # what the second read: exactly what the first's view changed
            now, before = (view_at(first, "boroughs", e) for e in (epoch, epoch - 1))
            assert feed_of_epoch(table, epoch) == (now - before, before - now)

    # a column the second's view does not read, renamed under column mapping: the
    # run goes on, no rebuild, the view still equal to Spark SQL over the table
    boroughs = f"delta.`{table.spark}`"
    spark.sql(f"ALTER TABLE {boroughs} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql(f"ALTER TABLE {boroughs} RENAME COLUMN last_trip TO newest_trip")
    said = run(second)
    assert "columns no view reads are NULL from now on: last_trip" in " ".join(said.split())
    assert "rebuilt" not in said, said
    spark.read.format("delta").load(table.spark).createOrReplaceTempView("boroughs")
    expected = bag([r.asDict() for r in spark.sql(CHAINED_SQL).collect()])
    assert view_at(second, "busy", 3) == expected
    shown = [cli(*c) for c in (["status", str(second), "--json"], ["explain", str(second), "busy"])]
    assert all(s3_server.secret_key not in text for text in shown)  # secrets never shown
