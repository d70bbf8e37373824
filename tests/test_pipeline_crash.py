"""A real ``dd-etl run`` killed mid-tick (SIGKILL at a failpoint), then run again:
the result equals one clean run, epoch for epoch, sinks included. Also checks that
``read --format csv`` writes only data to standard output."""

from __future__ import annotations

import csv
import io
import json
import signal
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from tests.support.child_process import dd_etl_process
from tests.support.pipeline_fixtures import bag, change_data, oracle, write_pipeline

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("failpoint", ["append.committed=1", "sink.files_written=1"])
def test_a_killed_tick_is_completed_by_the_next_run(
    spark: SparkSession, tmp_path: Path, failpoint: str
) -> None:
    pipeline = write_pipeline(tmp_path, f"crash_views_{failpoint.split('.')[0]}")
    change_data(tmp_path, 0)
    assert CliRunner().invoke(app, ["run", str(pipeline)]).exit_code == 0
    change_data(tmp_path, 1)
    killed = dd_etl_process("run", str(pipeline), failpoints=failpoint)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]

    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == 0, result.stderr
    assert "completed interrupted epoch 1" in result.stderr
    status = json.loads(CliRunner().invoke(app, ["status", str(pipeline), "--json"]).stdout)
    assert status["last_tick"]["epoch"] == 1
    assert [s["upper"] for s in status["sources"]] == [2, 2]

    for view in ("by_pc", "zoned"):
        got = CliRunner().invoke(app, ["read", str(pipeline), view, "--format", "json"])
        assert bag(json.loads(got.stdout)) == oracle(tmp_path, view), view
    table = DeltaTable(str(tmp_path / "out" / "by_pc"))
    assert bag(table.to_pyarrow_table().to_pylist()) == oracle(tmp_path, "by_pc")
    epochs = [h.get("dd_etl.epoch") for h in table.history() if "dd_etl.epoch" in h]
    assert sorted(epochs) == ["0", "1"]  # each epoch committed exactly once

    if failpoint.startswith("sink"):
        return
    # a separate process: standard output carries the CSV and nothing else
    read = dd_etl_process("read", str(pipeline), "zoned", "--format", "csv")
    assert read.returncode == 0, read.stderr[-3000:]
    rows = list(csv.DictReader(io.StringIO(read.stdout)))
    assert bag([{"borough": r["borough"], "trip_id": int(r["trip_id"])} for r in rows]) == oracle(
        tmp_path, "zoned"
    )
