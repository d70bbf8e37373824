"""Edge cases found by compiling SQL: counting non-numeric columns, reductions
with an empty key (one group of everything), and helper column names that a
user's columns already take."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.runtime import Runtime

pytestmark = pytest.mark.spark

ROWS = StructType(
    [
        StructField("k", LongType()),
        StructField("s", StringType()),
        StructField("__semi0", LongType()),
    ]
)


def test_string_counts_empty_keys_and_clashing_names(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    rows = flow.source("rows", ROWS)
    flow.view("counts", rows.aggregate(["k"], n=agg.count("s"), d=agg.count("s", distinct=True)))
    flow.view("first", rows.top_k([], ["k", "s"], 1))
    flow.view("everything", rows.count([], "n"))
    flow.view("matched", rows.semijoin(rows.filter("s = 'b'"), on="k"))
    rt = Runtime(flow)
    full = StructType([*ROWS.fields, StructField("_diff", LongType())])
    rt.append_source(
        "rows", spark.createDataFrame([(1, "a", 0, 1), (1, "b", 0, 1), (2, None, 0, 1)], full), 0
    )
    rt.append_source("rows", spark.createDataFrame([(1, "a", 0, -1), (0, "b", 7, 1)], full), 1)
    rt.run()

    def read(view: str, at: int) -> Counter[tuple[object, ...]]:
        return Counter(tuple(r) for r in rt.read(view, at).collect())

    assert read("counts", 0) == Counter({(1, 2, 2): 1, (2, 0, 0): 1})
    assert read("counts", 1) == Counter({(0, 1, 1): 1, (1, 1, 1): 1, (2, 0, 0): 1})
    assert read("first", 0) == Counter({(1, "a", 0): 1})
    assert read("first", 1) == Counter({(0, "b", 7): 1})
    assert read("everything", 1) == Counter({(3,): 1})
    assert read("matched", 0) == Counter({(1, "a", 0): 1, (1, "b", 0): 1})
    assert read("matched", 1) == Counter({(1, "b", 0): 1, (0, "b", 7): 1})
