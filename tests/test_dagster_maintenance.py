"""The Dagster code location loads, and its maintenance job merges and vacuums real traces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dd_etl.dagster import SparkResource, maintenance_definitions
from dd_etl.lattice import Antichain
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.maintenance import find_traces
from tests.support.kv_trace import SCHEMA, contents, frame

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parent.parent


def fill(spark: SparkSession, uri: Path, epochs: int) -> DeltaTrace:
    trace = DeltaTrace.create(spark, str(uri), uri.name, SCHEMA, ["k"], rows_per_file=4)
    for epoch in range(epochs):
        rows = [((k, f"e{epoch}"), (epoch,), 1) for k in range(epoch, epoch + 6)]
        trace.compare_and_append(
            frame(spark, rows), Antichain.from_epoch(epoch), Antichain.from_epoch(epoch + 1)
        )
    return trace


def test_maintenance_job_merges_and_vacuums_every_trace(
    spark: SparkSession, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    a = fill(spark, warehouse / "a", 4)
    a.open_reader("r", Antichain.from_epoch(4), Antichain.from_epoch(4))
    b = fill(spark, warehouse / "nested" / "b", 3)
    assert sorted(p.name for p in find_traces(warehouse)) == ["a", "b"]
    before = contents(a.read_at((4,)))

    defs = maintenance_definitions(warehouse, spark=SparkResource(master="local[2]"))
    job = defs.resolve_job_def("trace_maintenance")
    result = job.execute_in_process(
        run_config={"ops": {"trace_maintain_traces": {"config": {"retention_hours": 0}}}}
    )
    assert result.success
    assert result.output_for_node("trace_maintain_traces") == 2
    for trace, settled in ((a, 1), (b, 2)):  # 4 batches of 6 rows → 24; 3 → 12 + 6
        trace.reload()
        assert len(trace.state.batches) == settled
        assert trace.state.next_merge() is None
        on_disk = {
            p.relative_to(trace.where.path).as_posix()
            for p in (trace.where.path / "data").rglob("*.parquet")
        }
        assert on_disk == {f.path for f in trace.files()}
    assert contents(a.read_at((4,))) == before
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    metadata = output.event_specific_data.metadata  # type: ignore[union-attr]
    assert metadata["batches_after"].value == 3
    assert metadata["files_removed"].value > 0
    reports = {r["trace"]: r for r in metadata["traces"].value}
    assert reports["a"]["batches_before"] == 4 and reports["a"]["since"] == [[4]]


def test_code_location_validates(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    dagster = Path(sys.executable).parent / "dagster"
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Validation successful for code location dd_etl" in proc.stderr + proc.stdout
