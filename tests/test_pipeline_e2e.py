"""End to end through the CLI, as a user drives it: a pipeline over a Delta table
(change data feed) and a directory of parquet files with a ``diff`` column, over
several epochs of inserts, updates and deletes; after every epoch each view, and
the Delta table materializing one, equals DuckDB evaluating the view on the
sources as they are now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from tests.support.pipeline_fixtures import (
    BY_PC_SQL,
    BY_PC_V2_SQL,
    bag,
    change_data,
    oracle,
    write_pipeline,
)

pytestmark = pytest.mark.spark
EPOCHS = 3


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return result.stdout


def read_view(pipeline: Path, view: str, *extra: str) -> list[dict[str, object]]:
    return list(json.loads(cli("read", str(pipeline), view, "--format", "json", *extra)))


def test_views_follow_the_sources_epoch_by_epoch(spark: SparkSession, tmp_path: Path) -> None:
    # zoned is recomputed every epoch: its sink, history and change feed look the same
    pipeline = write_pipeline(tmp_path, "e2e_views_follow", zoned_refresh="full")
    history: dict[int, dict[str, object]] = {}
    for epoch in range(EPOCHS):
        change_data(tmp_path, epoch)
        cli("run", str(pipeline))
        history[epoch] = {v: oracle(tmp_path, v) for v in ("by_pc", "zoned")}
        for view in ("by_pc", "zoned"):
            assert bag(read_view(pipeline, view)) == history[epoch][view], (view, epoch)
        materialized = DeltaTable(str(tmp_path / "out" / "by_pc")).to_pyarrow_table()
        assert bag(materialized.to_pylist()) == history[epoch]["by_pc"], epoch
        if epoch > 0:  # a few changed rows, taken in and sunk as a small interval
            profile = json.loads(cli("status", str(pipeline), "--json"))["last_run"]["profile"]
            steps = {k: c["spark_jobs"] for k, c in profile["traces"].items()}
            jobs = {k: n for k, n in steps.items() if n and "/" not in k}  # not traces
            # a job per task slot (two) computes the changes of the sources, and one
            # per slot the rows of the sinks (a file source's schema is read from
            # its footer in the driver)
            assert jobs == {"ingest": 2, "sinks": 2}

    # a run with no new data is an empty epoch; past epochs stay readable. Its cost,
    # printed with --profile, is kept for status
    printed = cli("run", str(pipeline), "--profile")
    assert "Spark jobs" in printed and "phases (summed over threads)" in printed
    assert bag(read_view(pipeline, "zoned", "--as-of", "0")) == history[0]["zoned"]
    assert bag(read_view(pipeline, "by_pc", "--as-of", "1")) == history[1]["by_pc"]

    # columns in the order of the view, csv with a header
    csv_text = cli("read", str(pipeline), "zoned", "--format", "csv", "--limit", "2")
    assert csv_text.splitlines()[0] == "borough,trip_id"
    assert len(csv_text.splitlines()) == 3

    # the change feed sink holds every epoch's changes: summed, they are the view
    feed = DeltaTable(str(tmp_path / "out" / "zoned_changes")).to_pyarrow_table().to_pylist()
    assert {r["_epoch"] for r in feed} <= set(range(EPOCHS + 1))
    summed: dict[str, int] = {}
    for r in feed:
        key = json.dumps({"borough": r["borough"], "trip_id": r["trip_id"]}, sort_keys=True)
        summed[key] = summed.get(key, 0) + r["_diff"]
    assert {k: n for k, n in summed.items() if n} == dict(history[EPOCHS - 1]["zoned"])  # type: ignore[call-overload]

    changes = json.loads(cli("changes", str(pipeline), "zoned", "--from", "1", "--to", "3",
                             "--format", "json"))  # fmt: skip
    assert changes and {c["_epoch"] for c in changes} <= {1, 2}

    status = json.loads(cli("status", str(pipeline), "--json"))
    assert [s["upper"] for s in status["sources"]] == [EPOCHS + 1, EPOCHS + 1]
    assert all(v["lag"] == "up to date" for v in status["views"])
    assert status["views"][0]["sinks"] == {"materialize": EPOCHS}
    assert status["last_tick"]["epoch"] == EPOCHS
    assert status["last_run"]["epoch"] == EPOCHS
    assert status["last_run"]["profile"]["sizing"] == "small"
    assert isinstance(status["last_run"]["profile"]["spark_jobs"], int)

    assert "ok" in cli("verify", str(pipeline))
    assert "count" in cli("explain", str(pipeline), "by_pc")
    assert "refresh incremental: maintained" in cli("explain", str(pipeline), "by_pc")
    assert "refresh full: recomputed every epoch" in cli("explain", str(pipeline), "zoned")


def test_a_changed_sql_view_is_rebuilt_by_the_next_run(spark: SparkSession, tmp_path: Path) -> None:
    pipeline = write_pipeline(tmp_path, "e2e_views_changed", BY_PC_SQL)
    change_data(tmp_path, 0)
    cli("run", str(pipeline))
    write_pipeline(tmp_path, "e2e_views_changed", BY_PC_V2_SQL)
    change_data(tmp_path, 1)
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == 0, result.stderr
    assert "rebuilt by_pc: its definition changed" in result.stderr
    assert "rebuilt zoned" not in result.stderr
    assert bag(read_view(pipeline, "by_pc")) == oracle(tmp_path, "by_pc_v2")
    assert bag(read_view(pipeline, "zoned")) == oracle(tmp_path, "zoned")
    materialized = DeltaTable(str(tmp_path / "out" / "by_pc")).to_pyarrow_table()
    assert bag(materialized.to_pylist()) == oracle(tmp_path, "by_pc_v2")
