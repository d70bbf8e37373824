"""A pipeline shaped like a dbt project (staging views over seven sources, joins and
aggregates over them, marts with windows, grouping sets and subqueries, views over
views seven levels deep), run as a user runs it: a load and epochs of inserts,
updates and deletes, every view equal to DuckDB's evaluation after each. The
layers' traces share Spark jobs as the driver's memory allows: at a small driver
they are grouped into more jobs, not left to fail; a Spark out-of-memory in a
layer is retried once in smaller jobs, and when that fails too it is an error
naming the layer's views and the setting to raise, with nothing of the epoch
committed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl import failpoints
from dd_etl.cli import app
from dd_etl.dagster import SparkResource, pipeline_definitions
from dd_etl.dagster.names import PIPELINES_ENV
from tests.conftest import CHILD_JVMS
from tests.support.many_views import ManyViews
from tests.support.trace_rows import view_contents

pytestmark = pytest.mark.spark

VIEWS = 200
"""A dbt project's size: the staging views and eleven blocks of every kind of
view the generator has."""
ROOT = Path(__file__).resolve().parent.parent
DD_ETL = (sys.executable, "-c", "from dd_etl.cli import app; app()")
DAGSTER = str(Path(sys.executable).parent / "dagster")
GROUPED = re.compile(
    r"^\s+layer (\d+) \(.*\n\s+shared jobs .*writes grouped into (\d+) jobs$", re.MULTILINE
)


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.stdout, result.stderr, result.exception)
    return result.stdout + result.stderr


def mismatched(views: ManyViews) -> list[str]:
    want = views.oracle()
    return [v for v in views.view_names if view_contents(views.root / "wh", v) != want[v]]


def test_a_200_view_pipeline_is_a_dagster_code_location(tmp_path: Path) -> None:
    """Loading it plans every view (SQL parsed, lineage read) but starts no Spark."""
    path = ManyViews(tmp_path, VIEWS).pipeline()
    validated = subprocess.run(
        [DAGSTER, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path), PIPELINES_ENV: str(path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert validated.returncode == 0, validated.stderr[-2000:]
    graph = pipeline_definitions([path], spark=SparkResource()).resolve_asset_graph()
    views = {k.path[-1] for k in graph.get_all_asset_keys()} - {
        "customers", "orders", "order_items", "products", "stores", "payments", "tickets"
    }  # fmt: skip
    assert views == set(ManyViews(tmp_path / "again", VIEWS).view_names)
    report = dg.AssetKey(["many_views", "report_segments_b10"])
    assert graph.get(report).parent_keys == {
        dg.AssetKey(["many_views", "mart_tier_summary_b10"]),
        dg.AssetKey(["many_views", "mart_rollup_b10"]),
    }


def test_every_view_equals_duckdb_over_a_load_and_an_epoch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load is a Dagster tick materializing every view; the epoch ``dd-etl run``,
    met by a Spark out-of-memory in a layer: once in every job of the layer (status
    3, nothing of the epoch committed), then, in a process of its own on a 512 MB
    driver (a fifth of it for tasks and storage: about 30 MB the tasks share), once
    in the layer's first job, which is computed again in halves. That run's layers'
    traces are grouped into more jobs than Spark runs tasks at once, and it passes."""
    views = ManyViews(tmp_path, VIEWS)
    path = str(views.pipeline())
    defs = pipeline_definitions([Path(path)], spark=SparkResource())
    tick = defs.resolve_job_def("many_views_tick")
    result = tick.execute_in_process(instance=dg.DagsterInstance.ephemeral())
    assert result.success
    materialized = {
        e.asset_key.path[-1] for e in result.get_asset_materialization_events() if e.asset_key
    }
    assert set(views.view_names) <= materialized
    assert mismatched(views) == []

    views.change()
    before = {v: view_contents(tmp_path / "wh", v) for v in views.view_names}
    monkeypatch.setenv("DD_ETL_FAILPOINTS", "layers/1.job=1+:oom")
    failpoints.rearm()
    try:
        said = cli("run", path, code=3)
    finally:
        monkeypatch.delenv("DD_ETL_FAILPOINTS")
        failpoints.rearm()
    assert "Spark ran out of memory computing layer 1 of the run" in said, said
    assert "spark.driver.memory" in said and "stg_" in said, said
    assert {v: view_contents(tmp_path / "wh", v) for v in views.view_names} == before
    assert "last tick: epoch 0," in cli("status", path)

    small = {"spark.driver.memory": "512m", "spark.memory.fraction": "0.2"}
    views.pipeline({"spark.sql.shuffle.partitions": "2", **small})
    done = subprocess.run(
        [*DD_ETL, "run", path, "--profile"],
        cwd=ROOT,
        # a run of minutes: its JVM compiles with C2 too (conftest.py's child JVMs do not)
        env={**os.environ, "DD_ETL_FAILPOINTS": "layers/1.job=1:oom", CHILD_JVMS: "pyspark-shell"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    assert mismatched(views) == []
    grouped = {int(layer): int(jobs) for layer, jobs in GROUPED.findall(done.stdout)}
    assert grouped and max(grouped.values()) > 2, done.stdout
