"""Benchmark: what a ``materialize:`` table's commit costs per epoch as the view grows.

A view of ``--sizes`` distinct rows ``(id, bucket, amount)``, as an aggregate's
output is, takes a fixed change each epoch: ``--changed`` rows get a new amount
(each one retracted and added again): spread over the whole id range, or with
``--pattern recent`` the highest ids not changed yet. Three tables follow it, side
by side in one process:

* ``changes``: the epoch's changes applied by Spark (``sinks/spark_commit.py``:
  one MERGE with deletion vectors), as a large view's table takes them, rows
  matched on every column;
* ``keyed``: the same, rows matched by the view's unique key ``id`` alone, as an
  aggregate's table is;
* ``rewrite``: the view written whole each epoch and committed in place of the
  table's files (``SinkTable.commit`` with ``replace``), as every view's table was.

The rows a retracted row still has at the epoch are looked up in the view's
trace in a run; here the view is a set whose changed rows all move, so there
are none, and the benchmark measures the commit alone. Per size and epoch it
records seconds, rows added and removed, and bytes written, read back from each
commit's Delta log, after a round at the smallest size that is not recorded (a
JVM compiles Spark's code in its first minutes). Results go to
``bench/results/<--name>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from common import environment, recorded_argv, run_recorded
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from dd_etl.lake import Location, StoreOptions
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
MATCHED_BY: dict[str, tuple[str, ...] | None] = {"changes": None, "keyed": ("id",)}
STRIDE = 7919
"""``spread`` changes ids ``k * STRIDE mod size``: a prime, so distinct for every
``k`` below the size, and spread over the id range (and so over the table's files)."""
PATTERNS = ("spread", "recent")
"""Which ids change: the ``k``-th changed row's id spread over the range, or the
``k``-th highest (``recent``: new ids, as the latest dates of a daily aggregate)."""


def _id_of(pattern: str, size: int, k: Column) -> Column:
    return (k * STRIDE) % size if pattern == "spread" else F.lit(size - 1) - k


def _k_of(pattern: str, size: int, id_: Column) -> Column:
    return (id_ * pow(STRIDE, -1, size)) % size if pattern == "spread" else size - 1 - id_


def view(spark: SparkSession, size: int, epoch: int, changed: int, pattern: str) -> DataFrame:
    """The view at ``epoch``: an id's amount grows by one in the epoch it changes."""
    ids = spark.range(size).select(F.col("id"))
    bumps = F.lit(0)
    for e in range(1, epoch + 1):
        first, last = (e - 1) * changed, e * changed
        k = _k_of(pattern, size, F.col("id"))
        bumps = bumps + F.when((k >= first) & (k < last), 1).otherwise(0)
    return ids.select(
        "id", (F.col("id") % 1000).alias("bucket"), (F.col("id") * 1.5 + bumps).alias("amount")
    )


def changes(spark: SparkSession, size: int, epoch: int, changed: int, pattern: str) -> DataFrame:
    """The view's changes at ``epoch``: each changed row (one that never changed
    before) retracted with its old amount and added with its new one."""
    k = spark.range((epoch - 1) * changed, epoch * changed)
    ids = k.select(_id_of(pattern, size, F.col("id")).alias("id"))
    old = F.col("id") * 1.5
    rows = ids.select("id", (F.col("id") % 1000).alias("bucket"))
    retracted = rows.select("id", "bucket", old.alias("amount"), F.lit(-1).cast("long").alias(DIFF))
    added = rows.select(
        "id", "bucket", (old + 1).alias("amount"), F.lit(1).cast("long").alias(DIFF)
    )
    return retracted.unionByName(added)


def _timed(commit: Callable[[], SinkWrite | None]) -> dict[str, Any]:
    started = time.perf_counter()
    w = commit()
    seconds = time.perf_counter() - started
    assert w is not None
    return {
        "seconds": round(seconds, 2),
        "operation": w.operation,
        "rows_added": w.rows_added,
        "rows_removed": w.rows_removed,
        "bytes_added": w.bytes_added,
    }


def run(
    spark: SparkSession, root: Location, sizes: list[int], epochs: int, changed: int, pattern: str
) -> dict[str, Any]:
    results: dict[str, Any] = {"sizes": {}}
    for size in sizes:
        incremental = {
            kind: SinkTable(root / f"{kind}_{size}", "bench", "view", kind, SCHEMA)
            for kind in MATCHED_BY
        }
        rewritten = SinkTable(root / f"rewrite_{size}", "bench", "view", "rewrite", SCHEMA)
        per_epoch = []
        for epoch in range(epochs + 1):
            whole = view(spark, size, epoch, changed, pattern)
            row: dict[str, Any] = {"epoch": epoch}
            for kind, table in incremental.items():
                commit = SparkCommit(
                    spark,
                    table,
                    table.log(),
                    epoch,
                    SCHEMA.fieldNames(),
                    MATCHED_BY[kind],
                    whole if epoch == 0 else None,
                    None if epoch == 0 else changes(spark, size, epoch, changed, pattern),
                    lambda rows: rows.limit(0),  # every changed row moved: none left
                    {},
                )
                row[kind] = _timed(commit.commit)
            row["rewrite"] = _timed(partial(rewritten.commit, epoch, whole, True, {}))
            print(size, row, flush=True)
            per_epoch.append(row)
        expected = _fingerprint(spark, rewritten.where.spark)
        for kind, table in incremental.items():
            assert _fingerprint(spark, table.where.spark) == expected, (
                f"{kind} differs from the rewrite"
            )
        results["sizes"][str(size)] = per_epoch
    return results


def _fingerprint(spark: SparkSession, uri: str) -> tuple[Any, ...]:
    """A table's rows as a count and a sum of row hashes: equal for equal bags (but
    for a hash collision), in one scan rather than a shuffle of 100 M rows."""
    rows = spark.read.format("delta").load(uri)
    hashed = F.xxhash64(*[F.col(c) for c in rows.columns])
    return tuple(rows.agg(F.count(F.lit(1)), F.sum(hashed.cast("decimal(38,0)"))).first() or ())


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    seconds, written = fig.subplots(1, 2)
    sizes = sorted(int(s) for s in result["sizes"])
    for kind in (*MATCHED_BY, "rewrite"):
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
    fig.suptitle(
        f"materialize: a fixed change per epoch ({result['changed']} rows, {result['pattern']} ids)"
    )
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000,100000000")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--changed", type=int, default=1000)
    parser.add_argument("--pattern", choices=PATTERNS, default="spread")
    parser.add_argument("--name", default="sink")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--object-storage",
        action="store_true",
        help="the tables on an S3 server started here (in memory) instead of a local disk",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    def benchmark(spark: SparkSession, root: Location) -> dict[str, Any]:
        run(spark, root / "warmup", sizes[:1], args.epochs, args.changed, args.pattern)
        measured = run(spark, root, sizes, args.epochs, args.changed, args.pattern)
        return {
            "argv": recorded_argv(),
            "changed": args.changed,
            "pattern": args.pattern,
            "object_storage": args.object_storage,
            "environment": environment(spark),
            **measured,
        }

    if not args.object_storage:
        run_recorded(
            args.name,
            lambda spark, root: benchmark(spark, Location.of(root)),
            plot,
            args.workdir,
            args.keep,
            memory="8g",
        )
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.s3_server import started  # the tests' S3 server, in memory

    with started() as server:
        bucket = Location.of(f"s3://{server.bucket()}", StoreOptions.of(server.storage_options()))

        def on_store(spark: SparkSession, _: Path) -> dict[str, Any]:
            bucket.configure(spark)
            return benchmark(spark, bucket)

        run_recorded(args.name, on_store, plot, args.workdir, args.keep, "8g", object_storage=True)


if __name__ == "__main__":
    main()
