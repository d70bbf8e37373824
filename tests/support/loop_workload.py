"""A deterministic loop workload (BFS over changing edges), run in a child
process that tests kill."""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow, graphs
from dd_etl.runtime import Runtime
from tests.support.child_process import main

EPOCHS = 4
EDGES = StructType(
    [
        StructField("src", LongType()),
        StructField("dst", LongType()),
        StructField("_diff", LongType()),
    ]
)
ROOTS = StructType([StructField("node", LongType()), StructField("_diff", LongType())])
CHANGES: list[list[tuple[int, int, int]]] = [
    [(0, 1, 1), (1, 2, 1), (2, 3, 1), (3, 4, 1), (1, 5, 1)],
    [(2, 3, -1), (5, 3, 1)],  # a detour
    [(4, 0, 1), (0, 1, -1)],  # the root is cut off
    [(0, 4, 1), (0, 1, 1)],
]


def run(spark: SparkSession, warehouse: Path) -> Runtime:
    flow = Dataflow(spark, warehouse)
    edges = flow.source("edges", StructType(EDGES.fields[:2]))
    roots = flow.source("roots", StructType(ROOTS.fields[:1]))
    flow.view("hops", graphs.bfs(roots, edges))
    rt = Runtime(flow)
    for first, last in ((0, 2), (2, EPOCHS)):
        for epoch in range(first, last):
            rt.append_source("edges", spark.createDataFrame(CHANGES[epoch], EDGES), epoch)
            root = [(0, 1)] if epoch == 0 else []
            rt.append_source("roots", spark.createDataFrame(root, ROOTS), epoch)
        rt.run()
    return rt


if __name__ == "__main__":
    main("dd_etl-loop-crash", lambda spark: run(spark, Path(sys.argv[1])))
