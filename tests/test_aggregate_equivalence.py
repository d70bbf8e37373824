"""SQL aggregates (robust reductions) and outer joins against DuckDB, epoch by epoch:
COUNT/SUM/AVG accumulated in place, hierarchical MIN/MAX, DISTINCT aggregates,
NULL groups and NULL values, retractions of the current minimum and maximum."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.runtime import Runtime
from dd_etl.runtime.recompute import recompute
from dd_etl.runtime.sizing import Thresholds
from tests.support.sizings import DEFAULT, MEDIUM

pytestmark = pytest.mark.spark

TRIPS = StructType(
    [
        StructField("id", LongType()),
        StructField("pc", LongType()),
        StructField("fare", DoubleType()),
        StructField("dist", LongType()),
    ]
)
ORACLE = {
    "fares": "SELECT pc, COUNT(*), COUNT(fare), SUM(fare), AVG(fare), MIN(fare), MAX(fare), "
    "COUNT(DISTINCT dist), SUM(DISTINCT dist), MIN(dist) FROM trips GROUP BY pc",
    "overall": "SELECT COUNT(*), COUNT(fare), SUM(fare), MIN(fare), COUNT(DISTINCT dist) "
    "FROM trips WHERE fare > 30",
    "left": "SELECT a.id, a.pc, b.id2 FROM trips a LEFT JOIN "
    "(SELECT id AS id2, dist FROM trips WHERE fare > 10) b ON a.pc = b.dist",
    "full": "SELECT a.id, a.pc, b.id2 FROM trips a FULL JOIN "
    "(SELECT id AS id2, dist FROM trips WHERE fare > 10) b ON a.pc = b.dist",
}


def build(spark: SparkSession, warehouse: Path, thresholds: Thresholds = DEFAULT) -> Runtime:
    flow = Dataflow(spark, warehouse)
    trips = flow.source("trips", TRIPS, key=["id"])
    fares = trips.aggregate(
        ["pc"],
        n=agg.count(),
        fares=agg.count("fare"),
        total=agg.sum_("fare"),
        mean=agg.avg("fare"),
        lo=agg.min_("fare"),
        hi=agg.max_("fare"),
        dists=agg.count("dist", distinct=True),
        dist_sum=agg.sum_("dist", distinct=True),
        near=agg.min_("dist"),
    )
    flow.view("fares", fares)
    overall = trips.filter("fare > 30").aggregate(
        [],
        n=agg.count(),
        fares=agg.count("fare"),
        total=agg.sum_("fare"),
        lo=agg.min_("fare"),
        dists=agg.count("dist", distinct=True),
    )
    flow.view("overall", overall)
    pricey = trips.filter("fare > 10").select(id2="id", dist="dist")
    for how in ("left", "full"):
        joined = trips.select("id", "pc").join(pricey, left_on=["pc"], right_on=["dist"], how=how)
        flow.view(how, joined.select("id", "pc", "id2"))
    return Runtime(flow, thresholds=thresholds)


Row = tuple[Any, ...]


def close(a: Counter[Row], b: Counter[Row]) -> bool:
    def norm(c: Counter[Row]) -> Counter[Row]:
        return Counter(
            tuple(round(v, 6) if isinstance(v, float) and not math.isnan(v) else v for v in r)
            for r in c.elements()
        )

    return norm(a) == norm(b)


@pytest.mark.parametrize("executors", [False, True], ids=["driver", "executors"])
def test_aggregates_and_outer_joins_equal_duckdb(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executors: bool
) -> None:
    rng = random.Random(5)
    # executors: every run sized medium: MIN/MAX tell reached keys in Spark, not the driver
    rt = build(spark, tmp_path / "warehouse", MEDIUM if executors else DEFAULT)
    live: Counter[Row] = Counter()
    history: list[Counter[Row]] = []
    epoch = 0
    full = StructType([*TRIPS.fields, StructField("_diff", LongType())])
    # runs of one epoch (every change at one time) and of two (a running sum in time order)
    for epochs_in_run in (1, 2, 1):
        for _ in range(epochs_in_run):
            changes: list[tuple[Row, int]] = []
            for _ in range(rng.randrange(2, 7)):
                row = (
                    rng.randrange(10),
                    rng.choice([1, 2, None]),
                    rng.choice([2.5, 7.25, 12.5, 40.0, None]),
                    rng.choice([1, 2, 3, None]),
                )
                changes.append((row, 1))
            # retract the current extremes of a group, and a few others
            for row in sorted((+live).elements(), key=lambda r: (r[2] is None, r[2] or 0))[:2]:
                changes.append((row, -1))
            rt.append_source(
                "trips", spark.createDataFrame([(*r, d) for r, d in changes], full), epoch
            )
            for r, d in changes:
                live[r] += d
            history.append(+live)
            epoch += 1
        assert rt.run().upper == epoch

    con = duckdb.connect()
    for e, rows in enumerate(history):
        con.execute(
            "CREATE OR REPLACE TABLE trips (id BIGINT, pc BIGINT, fare DOUBLE, dist BIGINT)"
        )
        if rows:
            con.executemany("INSERT INTO trips VALUES (?, ?, ?, ?)", list(rows.elements()))
        for view, sql in ORACLE.items():
            expected = Counter(tuple(r) for r in con.execute(sql).fetchall())
            ours = Counter(tuple(r) for r in rt.read(view, e).collect())
            assert close(ours, expected), (view, e, ours, expected)
    if executors:  # a from-scratch evaluation does not depend on the sizing: once is enough
        return
    for view in ORACLE:
        scratch = Counter(tuple(r) for r in recompute(rt, view, epoch - 1).collect())
        maintained = Counter(tuple(r) for r in rt.trace(rt.flow.views[view]).read_at().collect())
        assert close(scratch, maintained), view
