"""dd_etl on a Spark standalone cluster of two workers started by
infra/spark-standalone.sh: whole pipelines (the taxi demo, and SQL views with a
join, an aggregate and ``WITH RECURSIVE``) run with the ``dd-etl`` CLI as a user
runs them, through the dd_etl server that keeps the driver (so the application
and its executors) between commands, epoch by epoch, with a run killed midway
(its server with it) and run again. Every view, materialized sink and change
feed equals what the same pipeline gives in local mode over the same source
data. The workers get no ``PYTHONPATH``: executors need no dd_etl code."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dd_etl.server import client, identity
from dd_etl.spark import conf_applied
from tests.support import tpch_pipeline as tpch
from tests.support.cluster_pipelines import (
    JOIN_SINKS,
    JOIN_VIEWS,
    TAXI_VIEWS,
    cli,
    join_pipeline,
    outcome,
    taxi_generator,
    taxi_pipeline,
)
from tests.support.pipeline_fixtures import change_data
from tests.support.s3_pipelines import credentials, on_store, upload
from tests.support.s3_server import S3Server
from tests.support.tpch_data import SEED, history_of
from tests.support.tpch_reference import Reference

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "infra" / "spark-standalone.sh"
DD_ETL = Path(sys.executable).with_name("dd-etl")
WORKERS = 2
# Applications that run for seconds: like the tests' child drivers (conftest),
# driver and executors compile with C1 only.
SUBMIT_ARGS = (
    '--driver-java-options "-XX:TieredStopAtLevel=1" '
    "--conf spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1 pyspark-shell"
)
TAXI_SINKS = {
    "fares_by_passengers": "out/fares_by_passengers",
    "trips_by_borough": "out/trips_by_borough",
    "trips_by_borough_changes": "out/trips_by_borough_changes",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def without_pythonpath() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DD_ETL_FAILPOINTS")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A master and two workers of one core each; yields the directory of their
    state (``url`` in it holds the master's URL). The workers, and so their
    executors, run with the test's environment less ``PYTHONPATH``."""
    state = tmp_path_factory.mktemp("cluster")
    env = {
        **without_pythonpath(),
        "PYTHON": sys.executable,
        "SPARK_MASTER_PORT": str(free_port()),
        "SPARK_WORKER_INSTANCES": str(WORKERS),
        "SPARK_WORKER_CORES": "1",
        "SPARK_WORKER_MEMORY": "1g",
        "SPARK_LOCAL_DIRS": str(state / "local"),
    }
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(state)], env=env, capture_output=True, text=True
    )
    try:
        assert started.returncode == 0, started.stderr
        (state / "url").write_text(started.stdout.strip().splitlines()[-1])
        for i in range(1, WORKERS + 1):
            environ = Path(f"/proc/{(state / f'worker-{i}.pid').read_text().strip()}/environ")
            if environ.exists():
                assert b"\0PYTHONPATH=" not in b"\0" + environ.read_bytes()
        yield state
    finally:
        for server in identity.sockets(servers(state)):
            client.ask(server, {"kind": "stop"})
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, check=False)


def servers(state: Path) -> Path:
    """Where the dd_etl servers of the cluster's commands listen."""
    return state / "servers"


def master(state: Path) -> str:
    url = (state / "url").read_text()
    assert url.startswith("spark://")
    return url


def tasks_per_worker(state: Path) -> list[int]:
    """Tasks each worker's executors ran, over every application so far."""
    return [
        sum(log.read_text().count("Running task") for log in state.glob(f"work-{i}/*/*/stderr"))
        for i in range(1, WORKERS + 1)
    ]


class OnCluster:
    """``dd-etl ARGS`` started in a process of its own, run by the dd_etl server for
    the cluster (started by the first command); its standard error goes to a file,
    so it never blocks on a full pipe."""

    def __init__(self, state: Path, *args: str, failpoint: str = "") -> None:
        env = {
            **without_pythonpath(),
            identity.SERVER_ENV: "on",
            identity.DIRECTORY_ENV: str(servers(state)),
            "DD_ETL_SPARK_MASTER": master(state),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS,
        }
        if failpoint:
            env["DD_ETL_FAILPOINTS"] = failpoint
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by finished)
        self.proc = subprocess.Popen(
            [str(DD_ETL), *args], env=env, stdout=subprocess.DEVNULL, stderr=self.log
        )

    def finished(self) -> tuple[int, str]:
        """Its exit status and standard error, once it ends (killed after 10 minutes)."""
        try:
            self.proc.wait(timeout=600)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.seek(0)
            stderr = self.log.read().decode(errors="replace")
            self.log.close()
        return self.proc.returncode, stderr


def run_both(
    state: Path, cluster_file: Path, local_file: Path, epoch: int, failpoint: str = ""
) -> None:
    """Epoch ``epoch``: one ``dd-etl run`` of ``cluster_file`` on the cluster and,
    meanwhile, of ``local_file`` here (on the tests' local Spark). With
    ``failpoint``, the run on the cluster is killed there (its server SIGKILLed),
    then run again: that run, on a new server, completes the epoch."""
    run = OnCluster(state, "run", str(cluster_file), failpoint=failpoint)
    try:
        cli("run", str(local_file))
    finally:
        code, stderr = run.finished()
    if failpoint:
        assert code == client.INTERRUPTED, stderr[-3000:]
        code, stderr = OnCluster(state, "run", str(cluster_file)).finished()
        assert f"completed interrupted epoch {epoch}" in stderr, stderr[-3000:]
    assert code == 0, stderr[-3000:]


def assert_same(got: dict[str, object], expected: dict[str, object]) -> None:
    """Equal, or the differing entries as (on the cluster, locally)."""
    assert got.keys() == expected.keys()
    differing = [k for k in expected if got[k] != expected[k]]
    assert not differing, {k: (got[k], expected[k]) for k in differing}


TAXI_EPOCHS = 2  # the load, then an epoch whose first run is killed
TAXI_CRASH = 1  # its run on the cluster is killed once the sinks' files are written


def test_taxi_demo_on_a_cluster_equals_local(
    cluster: Path, spark: SparkSession, tmp_path: Path
) -> None:
    generate = taxi_generator().generate
    cluster_file = taxi_pipeline(tmp_path / "cluster", "../data")
    local_file = taxi_pipeline(tmp_path / "local", "../data")
    shuffle = "spark.sql.shuffle.partitions"
    with conf_applied(spark, {shuffle: spark.conf.get(shuffle) or "2"}):  # the file sets it
        for epoch in range(TAXI_EPOCHS):
            generate(tmp_path / "data", epoch, 100)
            failpoint = "sink.files_written=1" if epoch == TAXI_CRASH else ""
            run_both(cluster, cluster_file, local_file, epoch, failpoint)
        got = outcome(cluster_file, TAXI_VIEWS, TAXI_SINKS, TAXI_EPOCHS)
        expected = outcome(local_file, TAXI_VIEWS, TAXI_SINKS, TAXI_EPOCHS)
    assert expected["last tick"] == TAXI_EPOCHS - 1
    assert expected["trips_by_borough commits"] == [str(e) for e in range(TAXI_EPOCHS)]
    assert_same(got, expected)
    assert all(tasks_per_worker(cluster)), tasks_per_worker(cluster)


JOIN_EPOCHS = 2  # the load, then trips and zones changed


def test_join_aggregate_and_recursion_on_a_cluster_equal_local(
    cluster: Path,
    spark: SparkSession,
    s3_server: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cluster's pipeline keeps its warehouse, sources and sinks on S3: the
    driver and the executors share no disk but the store."""
    credentials(s3_server, monkeypatch)
    bucket = s3_server.bucket()
    cluster_file = on_store(join_pipeline(tmp_path / "cluster", "data"), s3_server, bucket)
    local_file = join_pipeline(tmp_path / "local", "../data")
    for epoch in range(JOIN_EPOCHS):
        change_data(tmp_path, epoch)
        upload(tmp_path / "data", s3_server, bucket)
        run_both(cluster, cluster_file, local_file, epoch)
    views = list(JOIN_VIEWS)
    on_s3 = {k: f"s3://{bucket}/{v}" for k, v in JOIN_SINKS.items()}
    got = outcome(cluster_file, views, on_s3, JOIN_EPOCHS)
    expected = outcome(local_file, views, JOIN_SINKS, JOIN_EPOCHS)
    assert sorted(p.name for p in cluster_file.parent.iterdir()) == ["pipeline.yaml"]
    assert expected["last tick"] == JOIN_EPOCHS - 1
    assert all(expected[f"{view}@{JOIN_EPOCHS - 1}"] for view in views)  # none is empty
    assert_same(got, expected)
    assert all(tasks_per_worker(cluster)), tasks_per_worker(cluster)


def test_sparks_paths_on_a_cluster_write_what_local_spark_writes(
    cluster: Path, spark: SparkSession, tpch_local_run: Reference, tmp_path: Path
) -> None:
    """TPC-H views with every run on Spark's executors (``sizing:`` lowered, as for
    large data): the load as a large interval, the next epochs as medium ones,
    batches written by the cluster's executors, materialized tables written whole
    then merged into, spine merges made by Spark (``compact``). Every trace, table
    and feed holds what the same pipeline on local Spark holds (whose views equal
    DuckDB's), row for row, in as many batches."""
    history = history_of(random.Random(SEED))
    on_cluster = tmp_path / "cluster"
    for taken, sizing in tpch.STEPS:
        for e in taken:
            tpch.write_epoch(tmp_path, e, history[e])
        cluster_file = tpch.pipeline_file(on_cluster, tpch.VIEWS, sizing, data="../data")
        code, stderr = OnCluster(cluster, "run", str(cluster_file)).finished()
        assert code == 0, stderr[-3000:]
    code, stderr = OnCluster(cluster, "compact", str(cluster_file)).finished()
    assert code == 0, stderr[-3000:]
    local = tpch_local_run
    assert local.merged
    assert tpch.batches(on_cluster) == local.batches
    assert len(local.traces) > 20 and tpch.traces(on_cluster) == local.traces
    assert local.outputs and tpch.outputs(spark, on_cluster, tpch.VIEWS) == local.outputs
    assert all(tasks_per_worker(cluster)), tasks_per_worker(cluster)
