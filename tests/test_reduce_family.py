"""top_k, threshold and a general Python reduce, epoch by epoch, against a
from-scratch evaluation in plain Python."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.runtime import Runtime

pytestmark = pytest.mark.spark

ROWS = StructType(
    [StructField("g", LongType()), StructField("x", LongType()), StructField("w", LongType())]
)
SPREAD = StructType([StructField("g", LongType()), StructField("spread", DoubleType())])
Row = tuple[Any, ...]


def spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Max minus min of x per group, weighted rows counted once: any Python will do."""
    return pd.DataFrame(
        {"g": [rows["g"].iloc[0]], "spread": [float(rows["x"].max() - rows["x"].min())]}
    )


def expected(live: Counter[Row]) -> dict[str, Counter[Row]]:
    rows = list(live.elements())
    out: dict[str, Counter[Row]] = {"top2": Counter(), "dups": Counter(), "spread": Counter()}
    for g in {r[0] for r in rows}:
        group = sorted((r for r in rows if r[0] == g), key=lambda r: (-r[1], r))
        out["top2"].update(group[:2])
        xs = [r[1] for r in group]
        out["spread"][(g, float(max(xs) - min(xs)))] += 1
    out["dups"] = Counter({r: 1 for r, n in live.items() if n >= 2})
    return out


def test_top_k_threshold_and_python_reduce(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    rows = flow.source("rows", ROWS, key=["g"])
    flow.view("top2", rows.top_k(["g"], [("x", True)], 2))
    flow.view("dups", rows.threshold("IF(_diff >= 2, 1, 0)"))
    flow.view("spread", rows.reduce(["g"], spread, SPREAD))
    rt = Runtime(flow)
    rng = random.Random(9)
    live: Counter[Row] = Counter()
    history = []
    full = StructType([*ROWS.fields, StructField("_diff", LongType())])
    for epoch in range(4):
        changes = [((rng.randrange(3), rng.randrange(6), 1), 1) for _ in range(rng.randrange(3, 8))]
        changes += [(r, -1) for r in rng.sample(list((+live).elements()), k=min(2, len(+live)))]
        rt.append_source("rows", spark.createDataFrame([(*r, d) for r, d in changes], full), epoch)
        for r, d in changes:
            live[r] += d
        history.append(+live)
        if epoch % 2:
            rt.run()
    for epoch, state in enumerate(history):
        want = expected(state)
        for view in ("top2", "dups", "spread"):
            got = Counter(tuple(r) for r in rt.read(view, epoch).collect())
            assert got == want[view], (view, epoch)


SCALED = StructType([StructField("g", LongType()), StructField("top", LongType())])


def largest_times(factor: int) -> Any:
    def largest(rows: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"g": [rows["g"].iloc[0]], "top": [int(rows["x"].max()) * factor]})

    return largest


def test_python_reductions_differing_only_in_captured_values_keep_their_own_traces(
    spark: SparkSession, tmp_path: Path
) -> None:
    flow = Dataflow(spark, tmp_path)
    rows = flow.source("rows", ROWS, key=["g"])
    flow.view("once", rows.reduce(["g"], largest_times(1), SCALED))
    flow.view("tenfold", rows.reduce(["g"], largest_times(10), SCALED))
    assert flow.views["once"].inputs[0].id != flow.views["tenfold"].inputs[0].id
    rt = Runtime(flow)
    rt.append_source("rows", spark.createDataFrame([(1, 4, 0), (1, 7, 0), (2, 3, 0)], ROWS), 0)
    rt.run()
    assert sorted(tuple(r) for r in rt.read("once").collect()) == [(1, 7), (2, 3)]
    assert sorted(tuple(r) for r in rt.read("tenfold").collect()) == [(1, 70), (2, 30)]
