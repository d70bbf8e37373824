"""A changed view definition is refused until rebuilt; a rebuild recomputes the view
and the views reading it from the sources; source positions persist with appends."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.plan.aggregates import count
from dd_etl.runtime import Runtime
from dd_etl.runtime.runner import PlanChanged
from dd_etl.trace.errors import SinceViolation

pytestmark = pytest.mark.spark

KV = StructType([StructField("k", LongType()), StructField("v", LongType())])


def runtime(spark: SparkSession, warehouse: Path, threshold: int) -> Runtime:
    flow = Dataflow(spark, warehouse)
    rows = flow.source("rows", KV, key=["k"])
    big = flow.view("big", rows.filter(f"v > {threshold}"))
    flow.view("big_keys", big.select("k").distinct())
    flow.view("all_keys", rows.select("k").distinct())
    return Runtime(flow)


def rows_of(rt: Runtime, view: str, at: int | None = None) -> Counter[tuple[object, ...]]:
    return Counter(tuple(r) for r in rt.read(view, at).collect())


def test_changed_view_is_refused_until_rebuilt(spark: SparkSession, tmp_path: Path) -> None:
    old = runtime(spark, tmp_path, threshold=1)
    for epoch, batch in enumerate([[(1, 1), (2, 5)], [(3, 2), (4, 0)]]):
        positions = {"version": str(epoch)}
        old.append_source("rows", spark.createDataFrame(batch, KV), epoch, positions)
        old.run()
    assert rows_of(old, "big") == Counter({(2, 5): 1, (3, 2): 1})

    new = runtime(spark, tmp_path, threshold=2)
    source = new.trace(new.flow.sources["rows"])
    assert source.state.meta_map == {"version": "1"}, "positions are read back from the log"
    with pytest.raises(PlanChanged, match="'big' changed"):
        new.run()
    assert (
        new.trace(new.flow.views["big"]).state.upper == old.trace(old.flow.views["big"]).state.upper
    )

    assert new.rebuild(["big"]) == ["big", "big_keys"], "views reading a rebuilt view follow it"
    new.append_source("rows", spark.createDataFrame([(5, 9)], KV), 2)
    report = new.run()
    assert (report.lower, report.upper) == (0, 3)
    assert rows_of(new, "big") == Counter({(2, 5): 1, (5, 9): 1})
    assert rows_of(new, "big_keys") == Counter({(2,): 1, (5,): 1})
    assert rows_of(new, "all_keys", 1) == Counter({(k,): 1 for k in (1, 2, 3, 4)}), "untouched"
    with pytest.raises(SinceViolation):
        new.read("big", 0)  # compacted source history cannot reproduce epoch 0


def test_trace_names_are_structural(spark: SparkSession, tmp_path: Path) -> None:
    def names(flow: Dataflow) -> set[str]:
        return {str(x.trace_name) for x in Runtime(flow).stateful_nodes()}

    first, second = Dataflow(spark, tmp_path), Dataflow(spark, tmp_path)
    a, b = (f.source("rows", KV) for f in (first, second))
    first.view("sums", a.aggregate(["k"], n=count()))
    first.view("top", a.top_k(["k"], ["v"], 1))
    second.view("top", b.top_k(["k"], ["v"], 1))  # defined in the other order
    second.view("sums", b.aggregate(["k"], n=count()))
    assert names(first) == names(second)

    third = Dataflow(spark, tmp_path)
    c = third.source("rows", KV)
    third.view("sums", c.aggregate(["k"], n=count()))
    third.view("top", c.top_k(["k"], ["v"], 2))
    changed = names(first) ^ names(third)
    assert changed and all(x.startswith("reductions/top_k_") for x in changed)
