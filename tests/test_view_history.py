"""A view keeps every past epoch readable (``read --as-of``, ``changes``) by holding
its stored times back, not its batch boundaries: its spine still merges, so a
long-lived view holds a few batches rather than one per epoch ever run."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.lattice import Antichain
from dd_etl.plan import Dataflow
from dd_etl.runtime import Runtime
from dd_etl.runtime.holds import RETENTION_READER
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.maintenance import maintain

pytestmark = pytest.mark.spark

KV = StructType([StructField("k", LongType()), StructField("v", LongType())])
CHANGES = StructType([*KV.fields, StructField("_diff", LongType())])
EPOCHS = 12


def runtime(spark: SparkSession, warehouse: Path) -> Runtime:
    flow = Dataflow(spark, warehouse)
    flow.view("kept", flow.source("rows", KV, key=["k"]).filter("v >= 0"))
    return Runtime(flow)


def test_a_view_reads_every_past_epoch_after_its_spine_merged(
    spark: SparkSession, tmp_path: Path
) -> None:
    rt = runtime(spark, tmp_path)
    view = rt.trace(rt.flow.views["kept"])
    # a view's trace as earlier versions registered it: retention held batch
    # boundaries at epoch 0 (remade here by another process of the same reader)
    earlier = DeltaTrace(spark, view.where)
    earlier.open_reader(RETENTION_READER).release()
    earlier.open_reader(RETENTION_READER, Antichain.from_epoch(0), Antichain.from_epoch(0))
    rt = runtime(spark, tmp_path)
    view = rt.trace(rt.flow.views["kept"])
    assert view.state.hold_map[RETENTION_READER].physical.is_empty()

    bags: list[Counter[tuple[int, int]]] = []
    bag: Counter[tuple[int, int]] = Counter()
    for epoch in range(EPOCHS):  # each epoch inserts a row and deletes the one of two before
        changes = [(epoch, epoch, 1)] + ([(epoch - 2, epoch - 2, -1)] if epoch >= 2 else [])
        rt.append_source("rows", spark.createDataFrame(changes, CHANGES), epoch)
        rt.run()
        for k, v, d in changes:
            bag[(k, v)] += d
        bags.append(+bag)

    view.exert(None)
    assert len(view.state.batches) < EPOCHS // 2, "one batch per epoch: nothing merged"
    for epoch, expected in enumerate(bags):
        assert Counter(tuple(r) for r in rt.read("kept", epoch).collect()) == expected, epoch
    feed = Counter((r["k"], r["_time"], r["_diff"]) for r in rt.changes("kept", 3, 9).collect())
    inserted = Counter({(e, e, 1): 1 for e in range(3, 9)})
    deleted = Counter({(e - 2, e, -1): 1 for e in range(3, 9)})
    assert feed == inserted + deleted


def test_a_runtime_reads_what_others_committed_since_it_last_looked(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A long-lived runtime must not read a view from the state it cached: maintenance
    elsewhere may have merged its batches and vacuumed their files, another process may
    have run epochs since."""
    rt = runtime(spark, tmp_path)
    for epoch in range(4):
        rt.append_source("rows", spark.createDataFrame([(epoch, epoch, 1)], CHANGES), epoch)
        rt.run()
    assert rt.read("kept").count() == 4  # this runtime has now cached the view's state
    view = rt.trace(rt.flow.views["kept"])

    report = maintain(DeltaTrace(spark, view.where), None, retention_hours=0)
    assert report.batches_after < report.batches_before and report.files_removed > 0
    other = runtime(spark, tmp_path)
    other.append_source("rows", spark.createDataFrame([(4, 4, 1), (0, 0, -1)], CHANGES), 4)
    other.run()

    expected = Counter({(k, k): 1 for k in range(1, 5)})
    assert Counter(tuple(r) for r in rt.read("kept").collect()) == expected
    assert Counter(tuple(r) for r in rt.read("kept", 2).collect()) == Counter(
        {(k, k): 1 for k in range(3)}
    )
    feed = Counter((r["k"], r["_time"], r["_diff"]) for r in rt.changes("kept", 3, 5).collect())
    assert feed == Counter({(3, 3, 1): 1, (4, 4, 1): 1, (0, 4, -1): 1})


def test_a_negative_multiplicity_fails_the_read_naming_the_view(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A retraction of a row that was never there leaves the view's trace broken:
    reading it fails in the query that reads it, naming the view and the row."""
    rt = runtime(spark, tmp_path)
    rt.append_source("rows", spark.createDataFrame([(1, 5, 1), (2, 7, -1)], CHANGES), 0)
    rt.run()
    with pytest.raises(Exception, match=r"view 'kept' has a negative multiplicity: .*\"k\":2"):
        rt.read("kept").collect()
