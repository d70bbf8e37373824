"""Benchmark: the load and the epochs of a pipeline of many views over little data,
against the number of views.

The pipeline is the dbt-shaped one of the many-views test (``tests/support/
many_views.py``: staging views over seven small sources, then blocks of joins,
aggregates, windows and grouping sets seven levels deep), at ``--views`` sizes.
Per size, in one process: the load, ``--epochs`` epochs of the generator's
change (a few dozen rows over every source: every view's inputs change), and one
epoch in which only the support tickets change (most views' inputs do not).
Also the seconds opening the pipeline takes, the first time and again after the
load (what every ``dd-etl`` command and Dagster step pays before its run).
Beside each: Spark jobs, planning seconds (summed over threads), Delta commits,
and plain Spark SQL building every view as a table in order, as ``dbt run`` does
on Spark (each view written as parquet, the views above it reading that). A
round at the smallest size comes first and is not recorded (a JVM compiles
Spark's code in its first minutes). Results: ``bench/results/many_views.json``
and ``.png``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common import environment, recorded_argv, run_recorded
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import SparkSession

from dd_etl.pipeline import run_tick
from dd_etl.pipeline.build import open_pipeline
from dd_etl.pipeline.tick import TickReport
from dd_etl.profiling import PLANNING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.support.many_views import DELTA, TICKETS, ManyViews  # noqa: E402


def measured(report: TickReport) -> dict[str, Any]:
    profile = report.profile
    assert profile is not None
    return {
        "seconds": round(report.seconds, 2),
        "spark_jobs": profile.spark_jobs,
        "planning_seconds": round(profile.phases.get(PLANNING, 0.0), 2),
        "delta_commits": profile.commits,
        "views_changed": sum(1 for n in report.views.values() if n),
    }


def spark_sql_build(spark: SparkSession, views: ManyViews, out: Path) -> float:
    """Seconds plain Spark SQL takes to build every view as a table, in order."""
    start = time.perf_counter()
    data = views.data
    for name in DELTA:
        spark.read.format("delta").load(str(data / name)).createOrReplaceTempView(name)
    spark.read.parquet(str(data / "payments")).createOrReplaceTempView("payment_updates")
    spark.sql(
        "SELECT payment_id, order_id, method, amount_cents FROM payment_updates "
        "GROUP BY ALL HAVING SUM(diff) > 0"
    ).createOrReplaceTempView("payments")
    schema = ", ".join(f"{c} {t}" for c, t in TICKETS.items())
    spark.read.csv(str(data / "tickets"), header=True, schema=schema).createOrReplaceTempView(
        "tickets"
    )
    for name, sql in views.sql.items():
        target = str(out / name)
        spark.sql(sql).write.mode("overwrite").parquet(target)
        spark.read.parquet(target).createOrReplaceTempView(name)
    return round(time.perf_counter() - start, 2)


def size(spark: SparkSession, root: Path, n: int, epochs: int) -> dict[str, Any]:
    views = ManyViews(root / f"views_{n}", n)
    file = views.pipeline()
    start = time.perf_counter()
    pipeline = open_pipeline(file, spark)
    row: dict[str, Any] = {"views": n, "open": round(time.perf_counter() - start, 2)}
    row["load"] = measured(run_tick(pipeline))
    start = time.perf_counter()
    open_pipeline(file, spark)
    row["open_again"] = round(time.perf_counter() - start, 2)
    row["spark_sql_build"] = spark_sql_build(spark, views, root / f"sql_{n}")
    row["epochs"] = []
    for _ in range(epochs):
        views.change()
        row["epochs"].append(measured(run_tick(pipeline)))
    views.epoch += 1
    views.add_tickets(8)
    row["tickets_only"] = measured(run_tick(pipeline))
    print(n, row, flush=True)
    return row


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(12, 4))
    FigureCanvasAgg(fig)
    seconds, jobs = fig.subplots(1, 2)
    rows = result["sizes"]
    n = [r["views"] for r in rows]

    def epoch(r: dict[str, Any], key: str) -> float:
        return float(statistics.median(e[key] for e in r["epochs"]))

    seconds.plot(n, [r["load"]["seconds"] for r in rows], "o-", label="load")
    seconds.plot(n, [epoch(r, "seconds") for r in rows], "o-", label="epoch, every source")
    seconds.plot(n, [r["tickets_only"]["seconds"] for r in rows], "o-", label="epoch, tickets")
    seconds.plot(n, [r["spark_sql_build"] for r in rows], "s--", label="Spark SQL, every view")
    seconds.plot(n, [epoch(r, "planning_seconds") for r in rows], "x:", label="epoch planning")
    seconds.plot(n, [r["open_again"] for r in rows], "x--", label="opening the pipeline again")
    jobs.plot(n, [epoch(r, "spark_jobs") for r in rows], "o-", label="Spark jobs an epoch")
    jobs.plot(n, [epoch(r, "delta_commits") for r in rows], "o-", label="Delta commits an epoch")
    for ax, title in ((seconds, "seconds"), (jobs, "per epoch of every source")):
        ax.set_xlabel("views")
        ax.set_title(title)
        ax.legend()
    fig.suptitle("many views over little data: load and epochs against the number of views")
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", default="10,50,200,500")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--name", default="many_views")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.views.split(",")]

    def benchmark(spark: SparkSession, root: Path) -> dict[str, Any]:
        size(spark, root / "warmup", sizes[0], 1)
        return {
            "argv": recorded_argv(),
            "environment": environment(spark),
            "sizes": [size(spark, root, n, args.epochs) for n in sizes],
        }

    run_recorded(args.name, benchmark, plot, args.workdir, args.keep, count_jobs=True)


if __name__ == "__main__":
    main()
