"""The batch writer: writes planned apart, computed by shared Spark jobs as the
placement says, each committed by its own writer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from dd_etl.lattice import Antichain
from dd_etl.runtime.sizing import SMALL, applied, medium
from dd_etl.spark_driver import driver_for
from dd_etl.spark_memory import SparkMemory
from dd_etl.trace.batch import WrittenBatch
from dd_etl.trace.batch_writer import Computed, TraceAppend, computed_together, write_together
from dd_etl.trace.delta_trace import CollectedBatch, DeltaTrace, PlannedBatch
from dd_etl.trace.job_groups import WriteCost
from dd_etl.trace.placement import DRIVER, LOOKUPS, Placement
from tests.support.kv_trace import SCHEMA, contents, frame
from tests.test_delta_trace import jobs_of

pytestmark = pytest.mark.spark


def e(x: int) -> Antichain:
    return Antichain.from_epoch(x)


def memory(spark: SparkSession) -> SparkMemory:
    return driver_for(spark).memory()


def trace(spark: SparkSession, path: Path) -> DeltaTrace:
    return DeltaTrace.create(spark, str(path), path.name, SCHEMA, ["k"], rows_per_file=16)


def append(t: DeltaTrace, updates: DataFrame, placement: Placement, **kw: object) -> TraceAppend:
    return TraceAppend(t, updates, e(0), e(1), placement, **kw)  # type: ignore[arg-type]


@dataclass
class RowsTaken:
    """A write of plain rows (as a sink's): what the driver was handed."""

    rows: DataFrame
    taken: list[pa.Table | None] = field(default_factory=list)

    def to_collect(self) -> PlannedBatch:
        return PlannedBatch.as_they_are(self.rows, 100)

    def to_write_on_executors(self) -> None:
        return None

    @property
    def cost(self) -> WriteCost:
        return WriteCost()

    def commit(self, computed: Computed | None) -> int:
        assert computed is None or isinstance(computed, CollectedBatch)
        self.taken.append(None if computed is None else computed.rows)
        return 0 if computed is None else computed.rows.num_rows


def test_in_the_driver_a_job_per_task_slot_computes_every_write(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Traces and plain rows, computed into the driver by a Spark job per task slot
    (two), launched from threads that carry the caller's job group, and each
    committed of what it was handed; a surely empty batch plans nothing, and a
    trace that holds the interval already commits nothing."""
    fresh, empty, held = (trace(spark, tmp_path / n) for n in ("fresh", "empty", "held"))
    rows = [((k % 3, f"v{k % 3}"), (0,), 1) for k in range(7)]  # duplicates sum
    held.compare_and_append(frame(spark, rows[:1]), e(0), e(1))
    sink = RowsTaken(spark.createDataFrame([(1, "a"), (2, "b")], "n long, s string"))
    traces = [
        append(fresh, frame(spark, rows), DRIVER),
        append(empty, frame(spark, []), DRIVER, at_most=0),
        append(held, frame(spark, rows), DRIVER),
    ]
    made: list[object] = []
    with applied(spark, SMALL):
        work = lambda: made.extend(write_together([*traces, sink], DRIVER, memory(spark)))  # noqa: E731
        assert jobs_of(spark, "writer-driver", work) == 2
    assert made == [True, True, False, 2]
    assert contents(fresh.read_at()) == {(0, "v0"): 3, (1, "v1"): 2, (2, "v2"): 2}
    assert empty.state.upper == e(1) and empty.state.records == 0
    assert contents(held.read_at()) == {(0, "v0"): 1}
    assert sink.taken[0] is not None and sink.taken[0].num_rows == 2


def test_on_the_executors_one_job_writes_the_batches_written_together(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Batches asking to be written with others are written by one job and
    committed as written; one written alone and plain rows are left to
    themselves, and no job runs when nothing is written together."""
    a, b, alone = (trace(spark, tmp_path / n) for n in ("a", "b", "alone"))
    rows = [((k, f"v{k}"), (0,), 1) for k in range(6)]
    sink = RowsTaken(spark.createDataFrame([(1, "a")], "n long, s string"))
    writes = [
        append(a, frame(spark, rows), LOOKUPS, slices_log2=0),
        append(b, frame(spark, rows[:2]), LOOKUPS, slices_log2=1),
        append(alone, frame(spark, rows), LOOKUPS),
    ]
    computed: list[Computed | None] = []
    with applied(spark, medium(2)):
        shared = memory(spark)
        work = lambda: computed.extend(computed_together([*writes, sink], LOOKUPS, shared))  # noqa: E731
        assert jobs_of(spark, "writer-executors", work) == 1
        none = lambda: computed_together([sink], LOOKUPS, shared)  # noqa: E731
        assert jobs_of(spark, "writer-none", none) == 0
    assert [type(c) for c in computed] == [WrittenBatch, WrittenBatch, type(None), type(None)]
    assert [w.commit(c) for w, c in zip(writes, computed[:3], strict=True)] == [True] * 3
    assert sink.commit(None) == 0
    expected = {(k, f"v{k}"): 1 for k in range(6)}
    assert contents(a.read_at()) == expected and contents(alone.read_at()) == expected
    assert contents(b.read_at()) == {(k, f"v{k}"): 1 for k in range(2)}
