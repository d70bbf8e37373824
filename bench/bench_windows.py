"""Benchmark: the window patterns of every dbt project, incremental against plain Spark SQL.

``--query dedup`` (default), the latest version of each order::

    SELECT order_id, updated_at, amount FROM (
      SELECT *, ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY updated_at DESC) AS rn
      FROM events) WHERE rn = 1

``--query running``, each account's running total and event number, over
accounts of a hundred orders (four hundred events) each::

    SELECT id, order_id, updated_at,
      SUM(amount) OVER (PARTITION BY order_id % ACCOUNTS ORDER BY updated_at) AS so_far,
      COUNT(*) OVER (PARTITION BY order_id % ACCOUNTS ORDER BY updated_at) AS nth
    FROM events

over an ``events`` table of ``--rows`` rows (default 10 M; four versions of each
of ``rows / 4`` orders). After the load (epoch 0), each epoch changes
``--fraction`` of the rows (default 0.1 %): new versions of random orders (each
the order's newest; 60 % of the changes for dedup, 98 % for the running total,
whose events mostly arrive in order), and as many deletes as updates of loaded
rows. ``explain`` shows how dd_etl keeps each; Spark SQL computes the query over
the current table, kept as parquet with each epoch's changes applied (timed apart).

Per epoch: seconds of ``Runtime.run()`` and of the append of the changes; the
Spark SQL query's seconds (run in full into Spark's ``noop`` sink) and the
seconds of applying the changes to its table. At the end the view must equal
Spark SQL's result. Results go to ``bench/results/<query>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import random
import sys
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

from dd_etl.plan import Dataflow
from dd_etl.plan.sql import compile_view, explain
from dd_etl.runtime import Runtime

VERSIONS = 4
ACCOUNTS_OF = 100
"""Orders per account of the running total."""
EVENTS = StructType(
    [
        StructField("id", LongType()),
        StructField("order_id", LongType()),
        StructField("updated_at", LongType()),
        StructField("amount", DoubleType()),
    ]
)


def queries(rows: int) -> dict[str, tuple[str, float]]:
    """Each query's SQL, and the share of its changes that are new versions."""
    account = f"PARTITION BY order_id % {max(1, rows // VERSIONS // ACCOUNTS_OF)}"
    return {
        "dedup": (
            "SELECT order_id, updated_at, amount FROM (SELECT *, ROW_NUMBER() OVER "
            "(PARTITION BY order_id ORDER BY updated_at DESC) AS rn FROM events) WHERE rn = 1",
            0.6,
        ),
        "running": (
            f"SELECT id, order_id, updated_at, "
            f"SUM(amount) OVER ({account} ORDER BY updated_at) AS so_far, "
            f"COUNT(*) OVER ({account} ORDER BY updated_at) AS nth FROM events",
            0.98,
        ),
    }


def event(id_: int, orders: int) -> tuple[int, int, int, float]:
    """Loaded row ``id_``, as ``loaded`` makes it in Spark (the same arithmetic)."""
    updated_at = id_ // orders * 1_000_000 + id_ * 104_729 % 1_000_000
    return (id_, id_ % orders, updated_at, id_ * 7_919 % 10_000 / 100)


def loaded(spark: SparkSession, rows: int, orders: int) -> DataFrame:
    i = F.col("id")
    return spark.range(rows, numPartitions=2).select(
        i.alias("id"),
        (i % orders).alias("order_id"),
        ((i / orders).cast("long") * 1_000_000 + i * 104_729 % 1_000_000).alias("updated_at"),
        (i * 7_919 % 10_000 / 100).cast("double").alias("amount"),
    )


class Changes:
    """Each epoch's changes, as ``(row, diff)``: loaded rows changed at most once."""

    def __init__(self, rows: int, seed: int, new_share: float) -> None:
        self.rows, self.orders, self.new_share = rows, rows // VERSIONS, new_share
        self.rng = random.Random(seed)
        self.touched: set[int] = set()
        self.next_id = rows

    def epoch(self, epoch: int, count: int) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for j in range(count):
            kind = self.rng.random()
            if kind < self.new_share:  # a new version, the order's newest
                order = self.rng.randrange(self.orders)
                at = 10_000_000_000 + epoch * 1_000_000 + j
                out.append((self.next_id, order, at, round(self.rng.random() * 100, 2), 1))
                self.next_id += 1
                continue
            id_ = self.rng.randrange(self.rows)
            while id_ in self.touched:
                id_ = self.rng.randrange(self.rows)
            self.touched.add(id_)
            old = event(id_, self.orders)
            out.append((*old, -1))
            if kind >= (1 + self.new_share) / 2:  # an update of the amount
                out.append((*old[:3], old[3] + 1.0, 1))
        return out


def timed(block: Callable[[], object]) -> float:
    started = time.perf_counter()
    block()
    return round(time.perf_counter() - started, 3)


def run(rt: Runtime) -> dict[str, Any]:
    """``rt.run()``: its seconds, and its profile's Spark jobs, sizing, seconds
    per trace and per phase, summed over threads (where an epoch's time goes)."""
    started = time.perf_counter()
    profile = rt.run().profile
    assert profile is not None
    return {
        "seconds": round(time.perf_counter() - started, 3),
        "spark_jobs": profile.spark_jobs,
        "sizing": profile.sizing,
        "by_trace": {name: round(c.seconds, 3) for name, c in profile.traces.items()},
        "phases": {p: round(s, 3) for p, s in profile.phases.items()},
    }


def spark_sql(spark: SparkSession, view: str) -> float:
    return timed(lambda: spark.sql(view).write.format("noop").mode("overwrite").save())


class PeerTable:
    """The events as parquet, rewritten with each epoch's changes applied."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark, self.root, self.epoch = spark, root, 0

    def write(self, df: DataFrame, epoch: int) -> None:
        df.write.parquet(str(self.root / f"e{epoch}"))
        self.spark.read.parquet(str(self.root / f"e{epoch}")).createOrReplaceTempView("events")
        self.epoch = epoch

    def apply(self, changes: DataFrame, epoch: int) -> None:
        current = self.spark.read.parquet(str(self.root / f"e{self.epoch}"))
        gone = changes.where("_diff < 0").select("id")
        new = changes.where("_diff > 0").select(*EVENTS.fieldNames())
        self.write(current.join(gone, "id", "left_anti").unionByName(new), epoch)


def benchmark(spark: SparkSession, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    sql, new_share = queries(args.rows)[args.query]
    flow = Dataflow(spark, root / "warehouse")
    view = compile_view(flow, sql, {"events": flow.source("events", EVENTS, key=["id"])}, "view")
    rt = Runtime(flow)
    peer = PeerTable(spark, root / "peer")
    orders = args.rows // VERSIONS
    load = {"peer_write_seconds": timed(lambda: peer.write(loaded(spark, args.rows, orders), 0))}
    table = spark.read.parquet(str(root / "peer" / "e0"))
    load["append_seconds"] = timed(lambda: rt.append_source("events", table, 0))
    load["incremental"] = run(rt)
    load["spark_sql_seconds"] = spark_sql(spark, sql)
    print(f"load of {args.rows:,} rows: {load}", flush=True)
    changes = Changes(args.rows, args.seed, new_share)
    full = StructType([*EVENTS.fields, StructField("_diff", LongType())])
    epochs = []
    for epoch in range(1, args.epochs + 1):
        rows = changes.epoch(epoch, max(1, round(args.rows * args.fraction)))
        df = spark.createDataFrame(rows, full).cache()
        entry: dict[str, Any] = {"epoch": epoch, "update_rows": df.count()}
        entry["append_seconds"] = timed(partial(rt.append_source, "events", df, epoch))
        entry["incremental"] = run(rt)
        entry["peer_apply_seconds"] = timed(partial(peer.apply, df, epoch))
        entry["spark_sql_seconds"] = spark_sql(spark, sql)
        entry["ratio"] = round(entry["spark_sql_seconds"] / entry["incremental"]["seconds"], 2)
        df.unpersist()
        epochs.append(entry)
        print(entry, flush=True)
    # floats as SUM adds them in some order: equal to the last bits that order moves
    ours, theirs = (rounded(df) for df in (rt.read("view"), spark.sql(sql)))
    equal = ours.exceptAll(theirs).isEmpty() and theirs.exceptAll(ours).isEmpty()
    if not equal:
        raise SystemExit("the view differs from Spark SQL's result")
    return {
        "config": vars(args) | {"argv": recorded_argv()},
        "environment": environment(spark),
        "plan": explain(view),
        "load": load,
        "epochs": epochs,
        "equal_to_spark_sql": equal,
    }


def rounded(df: DataFrame) -> DataFrame:
    return df.select(
        *(
            F.round(f.name, 6).alias(f.name) if isinstance(f.dataType, DoubleType) else f.name
            for f in df.schema.fields
        )
    )


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    epochs = result["epochs"]
    xs = [e["epoch"] for e in epochs]
    width = 0.38
    ax.bar(
        [x - width / 2 for x in xs],
        [e["incremental"]["seconds"] for e in epochs],
        width,
        label="dd_etl incremental epoch",
    )
    ax.bar(
        [x + width / 2 for x in xs],
        [e["spark_sql_seconds"] for e in epochs],
        width,
        label="Spark SQL over the current table",
    )
    cfg = result["config"]
    what = {"dedup": "ROW_NUMBER() = 1 dedup", "running": "running SUM and COUNT"}[cfg["query"]]
    ax.set_title(f"{what}, {cfg['rows']:,} rows, {cfg['fraction']:.2%} changed")
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds")
    ax.set_xticks(xs)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--query", choices=["dedup", "running"], default="dedup")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--fraction", type=float, default=0.001)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    run_recorded(
        args.query,
        lambda spark, root: benchmark(spark, root, args),
        plot,
        args.workdir,
        args.keep,
        memory=args.memory,
    )


if __name__ == "__main__":
    main()
