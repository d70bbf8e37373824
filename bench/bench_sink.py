"""Benchmark: what a ``materialize:`` table's commit costs per epoch as the view grows.

A view of ``--sizes`` distinct rows ``(id, bucket, amount)``, as an aggregate's
output is, takes a fixed change each epoch: ``--changed`` rows get a new amount
(each one retracted and added again), spread over the whole id range. Two tables
follow it, side by side in one process:

* ``changes``: the epoch's changes applied by Spark (``sinks/spark_commit.py``:
  one MERGE with deletion vectors), as a large view's table takes them;
* ``rewrite``: the view written whole each epoch and committed in place of the
  table's files (``SinkTable.commit`` with ``replace``), as every view's table was.

The rows a retracted row still has at the epoch are looked up in the view's
trace in a run; here the view is a set whose changed rows all move, so there
are none, and the benchmark measures the commit alone. Per size and epoch it
records seconds, rows added and removed, and bytes written, read back from each
commit's Delta log. Results go to ``bench/results/sink.json`` and ``sink.png``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from common import environment, recorded_argv, run_recorded
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from dd_etl.sinks.delta_table import SinkTable, SinkWrite
from dd_etl.sinks.spark_commit import SparkCommit
from dd_etl.trace.columns import DIFF

SCHEMA = StructType(
    [
        StructField("id", LongType(), False),
        StructField("bucket", LongType(), False),
        StructField("amount", DoubleType(), False),
    ]
)
STRIDE = 7919
"""Changed ids are ``k * STRIDE mod size``: a prime, so distinct for every ``k``
below the size, and spread over the id range (and so over the table's files)."""


def view(spark: SparkSession, size: int, epoch: int, changed: int) -> DataFrame:
    """The view at ``epoch``: an id's amount grows by one in the epoch it changes."""
    ids = spark.range(size).select(F.col("id"))
    bumps = F.lit(0)
    for e in range(1, epoch + 1):
        first, last = (e - 1) * changed, e * changed
        rank = F.expr(f"(id * {_inverse(size)}) % {size}")  # k for id = k * STRIDE mod size
        bumps = bumps + F.when((rank >= first) & (rank < last), 1).otherwise(0)
    return ids.select(
        "id", (F.col("id") % 1000).alias("bucket"), (F.col("id") * 1.5 + bumps).alias("amount")
    )


def _inverse(size: int) -> int:
    return pow(STRIDE, -1, size)


def changes(spark: SparkSession, size: int, epoch: int, changed: int) -> DataFrame:
    """The view's changes at ``epoch``: each changed row (one that never changed
    before) retracted with its old amount and added with its new one."""
    k = spark.range((epoch - 1) * changed, epoch * changed)
    ids = k.select(((F.col("id") * STRIDE) % size).alias("id"))
    old = F.col("id") * 1.5
    rows = ids.select("id", (F.col("id") % 1000).alias("bucket"))
    retracted = rows.select("id", "bucket", old.alias("amount"), F.lit(-1).cast("long").alias(DIFF))
    added = rows.select(
        "id", "bucket", (old + 1).alias("amount"), F.lit(1).cast("long").alias(DIFF)
    )
    return retracted.unionByName(added)


def timed(commit: Callable[[], SinkWrite | None]) -> tuple[float, SinkWrite]:
    started = time.perf_counter()
    written = commit()
    seconds = time.perf_counter() - started
    assert written is not None
    return seconds, written


def run(
    spark: SparkSession, root: Path, sizes: list[int], epochs: int, changed: int
) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": {}}
    for size in sizes:
        incremental = SinkTable(str(root / f"changes_{size}"), "bench", "view", "changes", SCHEMA)
        rewritten = SinkTable(str(root / f"rewrite_{size}"), "bench", "view", "rewrite", SCHEMA)
        per_epoch = []
        for epoch in range(epochs + 1):
            whole = view(spark, size, epoch, changed)
            commit = SparkCommit(
                spark,
                incremental,
                epoch,
                SCHEMA.fieldNames(),
                whole if epoch == 0 else None,
                None if epoch == 0 else changes(spark, size, epoch, changed),
                lambda rows: rows.limit(0),  # every changed row moved: none left
                {},
            )
            merge_s, merge_w = timed(commit.commit)
            rewrite_s, rewrite_w = timed(partial(rewritten.commit, epoch, whole, True, {}))
            row = {
                "epoch": epoch,
                "changes": {"seconds": round(merge_s, 2), **_written(merge_w)},
                "rewrite": {"seconds": round(rewrite_s, 2), **_written(rewrite_w)},
            }
            print(size, row, flush=True)
            per_epoch.append(row)
        same = (
            spark.read.format("delta")
            .load(incremental.uri)
            .exceptAll(spark.read.format("delta").load(rewritten.uri))
        )
        assert same.isEmpty(), "the two tables differ"
        results["sizes"][str(size)] = per_epoch
    return results


def _written(w: SinkWrite) -> dict[str, Any]:
    return {
        "operation": w.operation,
        "rows_added": w.rows_added,
        "rows_removed": w.rows_removed,
        "bytes_added": w.bytes_added,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    seconds, written = fig.subplots(1, 2)
    sizes = sorted(int(s) for s in result["sizes"])
    for kind in ("changes", "rewrite"):
        later = [[e[kind] for e in result["sizes"][str(s)] if e["epoch"] > 0] for s in sizes]
        seconds.plot(
            sizes, [sum(x["seconds"] for x in e) / len(e) for e in later], "o-", label=kind
        )
        written.plot(
            sizes,
            [sum(x["bytes_added"] for x in e) / len(e) / 2**20 for e in later],
            "o-",
            label=kind,
        )
    for ax, title in (
        (seconds, "seconds per epoch"),
        (written, "MB of data files written per epoch"),
    ):
        ax.set_xscale("log")
        ax.set_xlabel("view rows")
        ax.set_title(title)
        ax.legend()
    fig.suptitle(f"materialize: a fixed change per epoch ({result['changed']} rows)")
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000,100000000")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--changed", type=int, default=1000)
    parser.add_argument("--name", default="sink")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    def benchmark(spark: SparkSession, root: Path) -> dict[str, Any]:
        measured = run(spark, root, sizes, args.epochs, args.changed)
        return {
            "argv": recorded_argv(),
            "changed": args.changed,
            "environment": environment(spark),
            **measured,
        }

    run_recorded(args.name, benchmark, plot, args.workdir, args.keep, memory="8g")


if __name__ == "__main__":
    main()
