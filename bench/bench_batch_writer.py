"""Benchmark: where writing a large batch on the executors goes, and what its width costs.

A medium or large interval has Spark's executors write each layer's batches in
one job (``trace/executor_writes.write_each``): the union exchanged by slice of
the key-hash range, sorted by key hash, handed to Python as Arrow and written
with pyarrow. At 1 % of 100 M trips that is layer 1's largest line (the trips'
arrangement, 1.4 M update rows). This measures, on rows shaped like that
arrangement's (key hash, eight trip columns, time, diff):

* ``exchange``: the exchange alone (Spark's ``noop`` sink);
* ``exchange_sort``: the exchange and the sort by key hash;
* ``arrow_handoff``: both, then every row handed to Python as Arrow and counted;
* ``executor_writer``: ``write_each`` itself, the files written;
* ``spark_parquet``: Spark's own sorted parquet write, a job per batch and
  Spark's commit protocol (what ``write_each`` replaced for sharing a job);

each at the full width and with the columns a view of the trips reads (key
hash, three columns, time, diff): what pruning columns before an arrangement
would save. Results: ``bench/results/batch_writer.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from common import environment, recorded_argv, run_recorded
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, SparkSession

from dd_etl.lake import Location
from dd_etl.trace.columns import KEY_HASH
from dd_etl.trace.executor_writes import ExecutorBatch, write_each

SLICES_LOG2 = 2
"""Four slices, as the sizing gives a batch of this size on two cores."""
TRIP_COLUMNS = (
    "xxhash64(id) AS _key_hash",
    "id % 70000 AS route",
    "CAST(id % 265 AS INT) AS pickup_zone",
    "CAST(id % 263 AS INT) AS dropoff_zone",
    "id * 3 AS trip_id",
    "CAST(id % 7 AS INT) AS passengers",
    "CAST(id % 5000 AS DOUBLE) / 100 AS fare",
    "CAST(id % 3000 AS DOUBLE) / 10 AS distance",
    "TIMESTAMP '2024-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id % 100000) AS pickup",
    "CAST(7 AS BIGINT) AS _time",
    "CAST(IF(id % 3 = 0, -1, 1) AS BIGINT) AS _diff",
)
READ_BY_A_VIEW = (KEY_HASH, "route", "pickup_zone", "fare", "_time", "_diff")


def variants(root: Path) -> dict[str, Callable[[DataFrame, str], None]]:
    def exchanged(df: DataFrame) -> DataFrame:
        return df.repartition(1 << SLICES_LOG2, KEY_HASH)

    def counted(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pylist([{"rows": rows}])

    def noop(df: DataFrame) -> None:
        df.write.format("noop").mode("overwrite").save()

    return {
        "exchange": lambda df, _: noop(exchanged(df)),
        "exchange_sort": lambda df, _: noop(exchanged(df).sortWithinPartitions(KEY_HASH)),
        "arrow_handoff": lambda df, _: (
            exchanged(df)
            .sortWithinPartitions(KEY_HASH)
            .mapInArrow(counted, "rows BIGINT")
            .collect()
        ),
        "executor_writer": lambda df, tag: write_each(
            [ExecutorBatch(Location.of(root / tag), tag, df, 1, 1_000_000, SLICES_LOG2)]
        ),
        "spark_parquet": lambda df, tag: (
            exchanged(df).sortWithinPartitions(KEY_HASH).write.parquet(str(root / tag))
        ),
    }


def measure(spark: SparkSession, root: Path, rows: int, repeats: int) -> dict[str, Any]:
    source = root / "rows"
    spark.range(rows).selectExpr(*TRIP_COLUMNS).write.parquet(str(source))
    full = spark.read.parquet(str(source))
    widths = {"full": full, "pruned": full.select(*READ_BY_A_VIEW)}
    seconds: dict[str, dict[str, list[float]]] = {}
    for name, run in variants(root).items():
        for width, df in widths.items():
            run(df, f"warm-{name}-{width}")  # the first run of a plan compiles it
            timed = []
            for r in range(repeats):
                started = time.perf_counter()
                run(df, f"{name}-{width}-{r}")
                timed.append(round(time.perf_counter() - started, 3))
            seconds.setdefault(name, {})[width] = timed
            print(f"{name} ({width}, {len(df.columns)} columns): {timed}", flush=True)
    return {
        "rows": rows,
        "columns": {w: len(df.columns) for w, df in widths.items()},
        "seconds": seconds,
        "median_seconds": {
            name: {w: statistics.median(t) for w, t in by_width.items()}
            for name, by_width in seconds.items()
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    medians = result["median_seconds"]
    names = list(medians)
    fig = Figure(figsize=(8, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, width in enumerate(("full", "pruned")):
        columns = result["columns"][width]
        xs = [k + (i - 0.5) * 0.38 for k in range(len(names))]
        values = [medians[name][width] for name in names]
        ax.bar(xs, values, width=0.38, label=f"{width} ({columns} columns)")
    ax.set_xticks(range(len(names)), names, rotation=15)
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"Writing a batch of {result['rows']:,} rows on the executors (2 cores)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_400_000, help="default: 1 %% of 100 M")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    def benchmark(spark: SparkSession, root: Path) -> dict[str, Any]:
        measured = measure(spark, root, args.rows, args.repeats)
        return {"argv": recorded_argv(), "environment": environment(spark), **measured}

    run_recorded("batch_writer", benchmark, plot, args.workdir, args.keep)


if __name__ == "__main__":
    main()
