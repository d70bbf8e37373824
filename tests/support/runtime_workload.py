"""A deterministic dataflow workload, run in a child process that tests kill."""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.plan.sql import compile_view
from dd_etl.runtime import Runtime
from dd_etl.runtime.sizing import Thresholds
from tests.support.child_process import main
from tests.support.sizings import DEFAULT
from tests.support.trips_and_zones import TRIPS, ZONES

EPOCHS = 4
VIEWS = ("joined", "counts", "pcs", "first_fare", "running")
WINDOWS = {
    # a hierarchical top-k, then a window over the rows it keeps
    "first_fare": "SELECT id, pc, fare FROM trips "
    "QUALIFY ROW_NUMBER() OVER (PARTITION BY pc ORDER BY fare DESC) = 1",
    # a running sum: the runs of one epoch append after each partition's last row
    "running": "SELECT id, SUM(fare) OVER (PARTITION BY pc ORDER BY id "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run FROM trips",
}


def build(spark: SparkSession, warehouse: Path, thresholds: Thresholds = DEFAULT) -> Runtime:
    flow = Dataflow(spark, warehouse)
    trips = flow.source("trips", TRIPS, key=["id"])
    zones = flow.source("zones", ZONES)
    flow.view("joined", trips.join(zones, on="pc").select("id", "label"))
    flow.view("counts", trips.count(["pc"]))
    flow.view("pcs", trips.select("pc").distinct())
    for name, sql in WINDOWS.items():
        compile_view(flow, sql, {"trips": trips}, name=name)
    return Runtime(flow, thresholds=thresholds)


def changes(epoch: int) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    trips = [(epoch * 3 + j, (epoch + j) % 3 or None, 1.0 * j, ["a"], 1) for j in range(3)]
    if epoch:
        prev = epoch * 3 - 3
        trips.append((prev, (epoch - 1) % 3 or None, 0.0, ["a"], -1))
    zones = [(epoch % 3 + 1, f"z{epoch}", 1)]
    return trips, zones


def run(spark: SparkSession, warehouse: Path, thresholds: Thresholds = DEFAULT) -> Runtime:
    rt = build(spark, warehouse, thresholds)
    for first, last in ((0, 2), (2, 3), (3, EPOCHS)):
        for epoch in range(first, last):
            trips, zones = changes(epoch)
            for name, rows, schema in (("trips", trips, TRIPS), ("zones", zones, ZONES)):
                full = StructType([*schema.fields, StructField("_diff", LongType())])
                rt.append_source(name, spark.createDataFrame(rows, full), epoch)
        rt.run()
    return rt


if __name__ == "__main__":
    # runs over more source records than the second argument are large intervals
    sized = Thresholds(small_records=int(sys.argv[2])) if len(sys.argv) > 2 else DEFAULT
    main("dd_etl-runtime-crash", lambda spark: run(spark, Path(sys.argv[1]), sized))
