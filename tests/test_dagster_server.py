"""A Dagster tick handed to the dd_etl server, a real one in a process of its own: the
run gets the materializations, checks, log lines and failures a step in its own
process gives, while the server's Spark, started once, runs every epoch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from dd_etl.dagster import SparkResource, pipeline_definitions
from dd_etl.dagster.names import WARM_UNTIL_TAG
from dd_etl.dagster.step import Step, answer_in, decode, encode
from dd_etl.server import client, identity
from tests.support.child_process import alive
from tests.support.pipeline_fixtures import BY_PC_SQL, change_data, oracle, write_pipeline
from tests.test_dagster_pipeline import BY_PC, TRIPS, ZONED, checks, materializations, view_rows


def test_results_cross_from_the_server_as_they_were() -> None:
    results: list[Any] = [
        dg.MaterializeResult(
            asset_key=BY_PC,
            metadata={
                "upper": 3,
                "since": None,
                "spark seconds": 0.25,
                "preview": dg.MetadataValue.md("| pc |\n|---|\n| 1 |\n"),
                "run cost": dg.MetadataValue.json({"spark_jobs": 6, "phases": {"spark": 0.5}}),
            },
            data_version=dg.DataVersion("3"),
        ),
        dg.MaterializeResult(asset_key=TRIPS, metadata={"taken in": "2 new files"}),
        dg.AssetCheckResult(
            asset_key=ZONED,
            check_name="freshness",
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"lag (epochs)": 2},
        ),
    ]
    assert decode(json.loads(encode(results))) == results
    assert answer_in(b'progress\n{"results": [') == {}  # killed while answering
    step = Step("p.yaml", ("trips", "by_pc"), (("zoned", "freshness"),), 1, None, {"a": "b"})
    assert Step.from_json(step.to_json()) == step


@pytest.mark.spark
@pytest.mark.slow
def test_a_dagster_tick_runs_on_the_server(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(identity.SERVER_ENV, "on")
    monkeypatch.setenv(identity.DIRECTORY_ENV, str(tmp_path / "servers"))
    pipeline = write_pipeline(tmp_path, "dg_served", by_pc_sql=BY_PC_SQL)
    instance = dg.DagsterInstance.ephemeral()

    def tick() -> dg.JobDefinition:
        return pipeline_definitions([pipeline], spark=SparkResource()).resolve_job_def("e2e_tick")

    def server() -> dict[str, Any] | None:
        return client.ask(identity.server_for(os.environ).socket, {"kind": "status"})

    try:
        for epoch in range(2):
            change_data(tmp_path, epoch)
            due = time.time() + 3600  # the next tick, as the schedule tags a run
            result = tick().execute_in_process(instance=instance, tags={WARM_UNTIL_TAG: str(due)})
            assert result.success
            status = server()
            assert status is not None and status["commands"] == epoch + 1
            assert status["warm_until"] == due
            meta = materializations(result)
            assert meta[TRIPS]["epoch"] == epoch and meta[BY_PC]["upper"] == epoch + 1
            assert meta[BY_PC]["epochs"] == f"{epoch}..{epoch}"
            assert meta[BY_PC]["dagster/row_count"] == sum(oracle(tmp_path, "by_pc").values())
            assert "| pc | trips |" in meta[BY_PC]["preview"]
            assert meta[ZONED]["run cost"]["spark_jobs"] > 0
            assert all(checks(result).values()) and len(checks(result)) == 6
            logged = [e.user_message for e in instance.all_logs(result.run_id)]
            assert any(m.startswith("view:by_pc") for m in logged), logged
        # the server killed in the middle of the step: the run fails and says so; the
        # next run's new server completes the epoch
        change_data(tmp_path, 2)
        monkeypatch.setenv("DD_ETL_FAILPOINTS", "append.committed=4")  # sources in
        killed = tick().execute_in_process(instance=instance, raise_on_error=False)
        monkeypatch.delenv("DD_ETL_FAILPOINTS")
        assert not killed.success
        assert "server stopped during the step" in str(_failure(killed).description)
        assert server() is None
        resumed = tick().execute_in_process(instance=instance)
        assert resumed.success
        assert materializations(resumed)[TRIPS]["taken in"] == "already taken in"
        status = server()
        assert status is not None and status["commands"] == 1
        for view in ("by_pc", "zoned"):
            assert view_rows(spark, pipeline, view) == oracle(tmp_path, view), view

        # a dd_etl error in the server fails the run with its message and exit status
        broken = BY_PC_SQL.replace("COUNT(*)", "COUNT(no_such_column)")
        write_pipeline(tmp_path, "dg_served", by_pc_sql=broken)
        failed = tick().execute_in_process(instance=instance, raise_on_error=False)
        assert not failed.success
        data = _failure(failed)
        assert "no_such_column" in str(data.description)
        assert data.metadata["exit_status"].value == 2
        assert data.metadata["error"].value == "ConfigError"
        again = server()
        assert again is not None and again["pid"] == status["pid"] and again["commands"] == 2
    finally:
        last = server()
        client.ask(identity.server_for(os.environ).socket, {"kind": "stop"})
        deadline = time.monotonic() + 60
        while last is not None and alive(int(last["pid"])) and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.mark.spark
@pytest.mark.slow
def test_a_busy_server_leaves_the_step_to_the_run(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the server runs another command (another pipeline's run, held at a
    failpoint), a tick's step runs in the run's own process: the same results, and
    a line in the run's log saying why."""
    monkeypatch.setenv(identity.SERVER_ENV, "on")
    monkeypatch.setenv(identity.DIRECTORY_ENV, str(tmp_path / "servers"))
    other = tmp_path / "other"
    other.mkdir()
    held = write_pipeline(other, "dg_busy_other", by_pc_sql=BY_PC_SQL)
    change_data(other, 0)
    blocker = subprocess.Popen(
        [sys.executable, "-m", "dd_etl.cli", "run", str(held)],
        cwd=other,
        env={**os.environ, "DD_ETL_FAILPOINTS": "tick.sources_appended=1:pause"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def server() -> dict[str, Any] | None:
        return client.ask(identity.server_for(os.environ).socket, {"kind": "status"})

    try:
        deadline = time.monotonic() + 180
        while not (server() or {}).get("busy"):
            assert blocker.poll() is None and time.monotonic() < deadline, "never busy"
            time.sleep(0.2)
        pipeline = write_pipeline(tmp_path, "dg_busy", by_pc_sql=BY_PC_SQL)
        change_data(tmp_path, 0)
        instance = dg.DagsterInstance.ephemeral()
        defs = pipeline_definitions([pipeline], spark=SparkResource())
        result = defs.resolve_job_def("e2e_tick").execute_in_process(instance=instance)
        assert result.success
        meta = materializations(result)
        assert meta[BY_PC]["dagster/row_count"] == sum(oracle(tmp_path, "by_pc").values())
        assert all(checks(result).values()) and len(checks(result)) == 6
        logged = [e.user_message for e in instance.all_logs(result.run_id)]
        assert any("server did not take the step" in m for m in logged), logged
        for view in ("by_pc", "zoned"):
            assert view_rows(spark, pipeline, view) == oracle(tmp_path, view), view
        status = server()
        assert status is not None and status["busy"] and status["commands"] == 0  # none done
    finally:
        blocker.kill()
        blocker.wait()
        deadline = time.monotonic() + 60
        while server() is not None and time.monotonic() < deadline:
            time.sleep(0.1)


def _failure(result: dg.ExecuteInProcessResult) -> Any:
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    data = failure.step_failure_data.user_failure_data
    assert data is not None, failure.step_failure_data
    return data
