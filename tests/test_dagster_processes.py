"""Dagster as it runs for real, in processes of its own: a materialization killed
mid-way and recovered, the daemon starting a sensor-triggered tick against a
real Postgres instance, and ``dagster dev`` serving the demo code location."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dd_etl.dagster import SparkResource, pipeline_definitions
from dd_etl.dagster.names import PIPELINE_TAG, PIPELINES_ENV
from dd_etl.pipeline import open_pipeline
from tests.support.pipeline_fixtures import BY_PC_SQL, bag, change_data, oracle, write_pipeline
from tests.support.postgres_server import free_port, postgres_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@contextmanager
def started(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> Iterator[None]:
    """A background process group, stopped (and its children with it) on exit."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def views_match(spark: SparkSession, pipeline: Path, root: Path) -> None:
    p = open_pipeline(pipeline, spark)
    for view in ("by_pc", "zoned"):
        rows = [r.asDict() for r in p.runtime.read(view).collect()]
        assert bag(rows) == oracle(root, view), view


def test_a_killed_materialization_is_recovered_by_the_next_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    pipeline = write_pipeline(tmp_path, "dg_crash", by_pc_sql=BY_PC_SQL)
    change_data(tmp_path, 0)
    change_data(tmp_path, 1)
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        PIPELINES_ENV: str(pipeline),
        "DD_ETL_FAILPOINTS": "append.committed=4",  # both sources in, views half done
        "PYTHONPATH": str(ROOT),
    }
    command = [str(BIN / "dagster"), "job", "execute", "-m", "dd_etl.dagster.location"]
    killed = subprocess.run(
        [*command, "-j", "e2e_tick"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]

    tick = pipeline_definitions([pipeline], spark=SparkResource()).resolve_job_def("e2e_tick")
    result = tick.execute_in_process()
    assert result.success
    (trips,) = [
        m
        for m in result.asset_materializations_for_node("e2e_assets")
        if m.asset_key.path[-1] == "trips"
    ]
    assert trips.metadata["taken in"].value == "already taken in"  # the killed run's epoch 0
    views_match(spark, pipeline, tmp_path)
    table = DeltaTable(str(tmp_path / "out" / "by_pc"))
    assert [h["dd_etl.epoch"] for h in table.history() if "dd_etl.epoch" in h] == ["0"]


LOCATION = """
from dd_etl.dagster import pipeline_definitions

defs = pipeline_definitions(
    [{pipeline!r}],
    tick_cron=None,
    sensor_interval_seconds=3,
    maintenance_cron=None,
    audit_cron=None,
    automation_running=True,
)
"""


def test_the_daemon_runs_a_sensor_triggered_tick_on_a_postgres_instance(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = write_pipeline(tmp_path, "dg_daemon", by_pc_sql=BY_PC_SQL)
    (tmp_path / "location.py").write_text(LOCATION.format(pipeline=str(pipeline)))
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: location.py\n"
        "      working_directory: .\n      location_name: e2e\n"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "infra" / "dagster.yaml", home / "dagster.yaml")
    with postgres_server() as pg:
        settings = {
            "DAGSTER_HOME": str(home),
            "DAGSTER_PG_USERNAME": pg.user,
            "DAGSTER_PG_PASSWORD": pg.password,
            "DAGSTER_PG_HOST": pg.host,
            "DAGSTER_PG_DB": pg.db,
            "DAGSTER_PG_PORT": str(pg.port),
        }
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        env = {**os.environ, **settings, "PYTHONPATH": str(ROOT)}
        daemon = [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"]
        with (
            started(daemon, tmp_path, env, tmp_path / "daemon.log"),
            dg.DagsterInstance.get() as instance,
        ):
            time.sleep(10)  # the sensor looks, sees nothing new, starts nothing
            assert not instance.get_runs()
            change_data(tmp_path, 0)  # new Delta version and new file
            run = wait_for_run(instance, tmp_path / "daemon.log")
            assert run.status == dg.DagsterRunStatus.SUCCESS, (tmp_path / "daemon.log").read_text()[
                -3000:
            ]
            assert run.tags["dagster/sensor_name"] == "e2e_source_sensor"
            assert run.tags[PIPELINE_TAG] == "e2e"
            time.sleep(10)  # taken in: the sensor starts no second tick
            assert len(instance.get_runs()) == 1
    views_match(spark, pipeline, tmp_path)


def wait_for_run(instance: dg.DagsterInstance, log: Path, timeout: float = 400) -> dg.DagsterRun:
    deadline = time.monotonic() + timeout
    done = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    while time.monotonic() < deadline:
        runs = instance.get_runs()
        if runs and runs[0].status in done:
            return runs[0]
        time.sleep(2)
    raise AssertionError(
        f"no finished run within {timeout}s; daemon log:\n{log.read_text()[-3000:]}"
    )


@pytest.mark.parametrize("how", ["workspace", "dd-etl ui"])
def test_dagster_dev_serves_the_demo_asset_graph(tmp_path: Path, how: str) -> None:
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    if how == "workspace":
        command = [str(BIN / "dagster"), "dev", "-w", "workspace.yaml"]
    else:
        command = [str(BIN / "dd-etl"), "ui", "assets/taxi/pipeline.yaml"]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    query = json.dumps({"query": "{ assetNodes { assetKey { path } dependencyKeys { path } } }"})
    log = tmp_path / "dev.log"
    with started(command, ROOT, env, log):
        deadline = time.monotonic() + 240
        answer = None
        while answer is None and time.monotonic() < deadline:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/graphql",
                    data=query.encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=10) as response:
                    answer = json.loads(response.read())
            except OSError:
                time.sleep(2)
        assert answer is not None, log.read_text()[-3000:]
    nodes = {
        tuple(n["assetKey"]["path"]): {tuple(d["path"]) for d in n["dependencyKeys"]}
        for n in answer["data"]["assetNodes"]
    }
    assert nodes[("taxi", "trips_by_borough")] == {("taxi", "trips"), ("taxi", "zones")}
    assert nodes[("taxi", "reachable_from_zone_1")] == {("taxi", "links"), ("taxi", "zones")}
    assert ("taxi", "fares_by_passengers") in nodes
    assert "Traceback" not in log.read_text()
