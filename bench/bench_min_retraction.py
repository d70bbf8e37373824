"""Benchmark: what retracting the minimum of a huge group costs, per reduction level.

The NYC-taxi query of Materialize's "robust reductions" post,

    SELECT passenger_count, MIN(fare_amount), MAX(fare_amount),
           COUNT(DISTINCT trip_distance)
    FROM trips GROUP BY passenger_count

is maintained over a synthetic trip table with one big group (``passenger_count
= 1``, ``--sizes`` rows) and a few small ones. After the load (epoch 0) three
epochs change the big group: retract its current minimum fare, insert a new
minimum, retract a row that is neither extreme. A flat MIN/MAX (one reduction
over the group's values) has to re-read the whole group when its minimum goes;
dd_etl's hierarchical MIN/MAX (``Collection.extremes``) reduces by hash buckets
first, so each level re-reads at most a bucket's worth of records.

Two dataflows per size compute the same view:

* ``hierarchical``: ``trips.aggregate(...)`` with ``min_``/``max_``;
* ``flat``: the same COUNT(DISTINCT) part, but MIN and MAX as one
  ``Collection._reduce`` each, directly over ``(passenger_count, fare_amount)``.

For every epoch and every trace the benchmark records the records the epoch
appended, and for every reduction the history it read: the input
arrangement's and its own output's contents at ``lower - 1`` for the keys in its
input changes (see ``bench/README.md`` for the exact definitions), plus the wall
time of ``Runtime.run()``. Results go to ``bench/results/min_retraction.json``
and ``bench/results/min_retraction.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import environment, recorded_argv, run_recorded, write_json
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StructField,
    StructType,
)

from dd_etl.lattice import Antichain
from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import Collection
from dd_etl.runtime import Runtime
from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.file_stats import column_bounds

NAME = "min_retraction"
BIG_GROUP = 1
SMALL_GROUPS = (0, 2, 3, 4, 5, 6)
BENCH_READER = "bench"
"""A reader holding epoch 0 on every trace, so history stays readable as of any epoch."""

SCHEMA = StructType(
    [
        StructField("trip_id", LongType(), False),
        StructField("passenger_count", IntegerType(), True),
        StructField("fare_amount", DoubleType(), True),
        StructField("trip_distance", DoubleType(), True),
    ]
)
KEY = ("passenger_count",)
UPDATES = ("retract_min", "insert_min", "retract_other")
"""The epochs after the load, in order: 1, 2, 3."""
VARIANTS = ("hierarchical", "flat")


@dataclass(frozen=True)
class BenchConfig:
    sizes: tuple[int, ...]
    small_group_rows: int
    measure_physical: bool


# ------------------------------------------------------------------ data


def unit(seed: int) -> Column:
    """A uniform value in (0, 1] from a hash of the trip id: reproducible and partition-free."""
    bits = F.xxhash64(F.col("id"), F.lit(seed)).bitwiseAND((1 << 52) - 1)
    return (bits.cast("double") + 1.0) / float(1 << 52)


def trips(spark: SparkSession, first_id: int, count: int, passenger_count: int) -> DataFrame:
    """``count`` trips with ids from ``first_id``: fares are continuous (exponential
    above $2.50, never rounded), so every trip of a group is a distinct value, the
    worst case for a flat MIN; distances are rounded to 0.01 miles like the real data."""
    return spark.range(first_id, first_id + count, numPartitions=2).select(
        F.col("id").alias("trip_id"),
        F.lit(passenger_count).cast("int").alias("passenger_count"),
        (F.lit(2.5) - F.lit(12.0) * F.log(unit(1))).alias("fare_amount"),
        F.round(F.lit(0.1) - F.lit(2.5) * F.log(unit(2)), 2).alias("trip_distance"),
    )


def initial_table(spark: SparkSession, size: int, small_rows: int) -> DataFrame:
    parts = [trips(spark, 0, size, BIG_GROUP)]
    for i, pc in enumerate(SMALL_GROUPS):
        parts.append(trips(spark, size + i * small_rows, small_rows, pc))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    return df


# ------------------------------------------------------------------ dataflows


def hierarchical_view(trips: Collection) -> Collection:
    return trips.aggregate(
        list(KEY),
        min_fare=agg.min_("fare_amount"),
        max_fare=agg.max_("fare_amount"),
        distances=agg.count("trip_distance", distinct=True),
    )


def flat_view(trips: Collection) -> Collection:
    """The same result with MIN and MAX each as a single reduction over the group's values."""
    groups = trips.aggregate(list(KEY), distances=agg.count("trip_distance", distinct=True))
    values = trips.filter(F.col("fare_amount").isNotNull()).select(*KEY, "fare_amount")
    schema = StructType([SCHEMA["passenger_count"], SCHEMA["fare_amount"]])
    low = values._reduce(KEY, "min", schema, "fare_amount")
    high = values._reduce(KEY, "max", schema, "fare_amount")
    low = low.select(*KEY, F.col("fare_amount").alias("min_fare"))
    high = high.select(*KEY, F.col("fare_amount").alias("max_fare"))
    joined = groups.join(low, on=list(KEY), how="left", null_safe=True)
    joined = joined.join(high, on=list(KEY), how="left", null_safe=True)
    return joined.select(*KEY, "min_fare", "max_fare", "distances")


def build(spark: SparkSession, root: Path, variant: str) -> tuple[Runtime, n.View]:
    flow = Dataflow(spark, root / variant, name=f"{NAME}_{variant}")
    source = flow.source("trips", SCHEMA, key=["trip_id"])
    body = hierarchical_view(source) if variant == "hierarchical" else flat_view(source)
    view = flow.view("fares", body)
    runtime = Runtime(flow)
    start = Antichain.from_epoch(0)
    for node in runtime.stateful_nodes():
        runtime.trace(node).open_reader(BENCH_READER, start, start)
    assert isinstance(view.node, n.View)
    return runtime, view.node


# ------------------------------------------------------------------ measuring


@dataclass
class TraceMeasure:
    """One trace in one epoch: what the epoch appended, and for reductions what was read."""

    trace: str
    operator: str
    label: str
    written: int
    input_changes: int | None = None
    touched_keys: int | None = None
    input_history_read: int | None = None
    output_history_read: int | None = None
    input_stored_updates: int | None = None
    input_file_rows_scanned: int | None = None

    @property
    def read(self) -> int | None:
        if self.input_history_read is None:
            return None
        return self.input_history_read + (self.output_history_read or 0)


def written_in(trace: DeltaTrace, epoch: int) -> int:
    """Records of the batch appended for ``[epoch, epoch + 1)``."""
    lower, upper = Antichain.from_epoch(epoch), Antichain.from_epoch(epoch + 1)
    for b in trace.state.batches:
        if b.description.lower == lower and b.description.upper == upper:
            return b.records
    # Merged away by back-pressure: count its updates instead (the bench reader
    # holds epoch 0, so no time was advanced).
    return trace.updates(at=(epoch,)).where(F.col(TIME) == epoch).count()


def scanned_file_rows(trace: DeltaTrace, keys: DataFrame, at: int) -> int:
    """Rows in the files a key lookup as of ``at`` opens, mirroring ``DeltaTrace.updates``
    (which prunes whole files by their key-hash range; rows inside a file are not skipped)."""
    files = [f for f in trace.files() if (trace_min_time(f) or 0) <= at]
    if trace.state.key:
        files = trace._files_for_keys(files, keys)
    return sum(f.records for f in files)


def trace_min_time(file: DataFile) -> int | None:
    bounds = column_bounds(file, TIME)
    return None if bounds is None else int(bounds[0])


def level_labels(runtime: Runtime) -> dict[str, str]:
    """Readable names for the reductions: MIN/MAX levels numbered from the values up."""
    labels: dict[str, str] = {}
    counts: dict[str, int] = {}
    for layer in runtime.layers():
        for node in layer:
            if isinstance(node, n.Reduce) and node.kind in ("min", "max", "min_max"):
                counts[node.kind] = counts.get(node.kind, 0) + 1
                bucket = "__bucket" in node.key
                level = counts[node.kind]
                labels[node.id] = f"{node.kind} L{level}" + (" (by key, bucket)" if bucket else "")
    for node in runtime.stateful_nodes():
        if node.id in labels:
            continue
        if isinstance(node, n.Reduce):
            labels[node.id] = f"{node.kind} by {','.join(node.key)}"
        elif isinstance(node, n.Accumulate):
            labels[node.id] = f"accumulate by {','.join(node.key)} of {list(node.values)}"
        elif isinstance(node, n.Arrange):
            labels[node.id] = f"arrange by {','.join(node.key)}"
        elif isinstance(node, n.View):
            labels[node.id] = f"view {node.name}"
        elif isinstance(node, n.Source):
            labels[node.id] = f"source {node.name}"
        else:
            labels[node.id] = type(node).__name__.lower()
    # Single MIN/MAX reductions (the flat variant) are level 1 of 1.
    for node in runtime.stateful_nodes():
        if (
            isinstance(node, n.Reduce)
            and node.kind in ("min", "max")
            and counts.get(node.kind) == 1
        ):
            labels[node.id] = f"{node.kind} flat"
    return labels


def key_columns(node: n.Node) -> tuple[str, ...]:
    if isinstance(node, n.Reduce | n.Accumulate | n.Arrange | n.Source):
        return node.key
    return tuple(node.columns)


def measure(runtime: Runtime, epoch: int, physical: bool) -> list[TraceMeasure]:
    labels = level_labels(runtime)
    out: list[TraceMeasure] = []
    for node in runtime.stateful_nodes():
        trace = runtime.trace(node)
        m = TraceMeasure(
            trace=node.trace_name or node.id,
            operator=type(node).__name__.lower(),
            label=labels[node.id],
            written=written_in(trace, epoch),
        )
        if isinstance(node, n.Reduce):
            source = runtime.trace(node.inputs[0])
            changes = source.updates(at=(epoch,)).where(F.col(TIME) == epoch)
            keys = changes.select(*node.key).distinct().cache()
            m.input_changes = changes.count()
            m.touched_keys = keys.count()
            m.input_history_read = source.read_at((epoch - 1,), keys=keys).count()
            m.output_history_read = trace.read_at((epoch - 1,), keys=keys).count()
            if physical:
                m.input_stored_updates = (
                    source.updates(keys, at=(epoch - 1,)).where(F.col(TIME) <= epoch - 1).count()
                )
                m.input_file_rows_scanned = scanned_file_rows(source, keys, epoch - 1)
            keys.unpersist()
        elif isinstance(node, n.Accumulate):
            # In-place accumulation reads only its own state for the keys it changes.
            changes = trace.updates(at=(epoch,)).where(F.col(TIME) == epoch)
            keys = changes.select(*node.key).distinct()
            m.touched_keys = keys.count()
            m.output_history_read = trace.read_at((epoch - 1,), keys=keys).count()
        out.append(m)
    return out


# ------------------------------------------------------------------ one size


def extreme_row(table: DataFrame, ascending: bool) -> dict[str, Any]:
    order = F.col("fare_amount").asc() if ascending else F.col("fare_amount").desc()
    row = table.where(F.col("passenger_count") == BIG_GROUP).orderBy(order).limit(1).collect()[0]
    return row.asDict()


def expected_view(table: DataFrame) -> list[tuple[Any, ...]]:
    """The query as a plain Spark batch query: the oracle."""
    rows = table.groupBy(*KEY).agg(
        F.min("fare_amount"), F.max("fare_amount"), F.countDistinct("trip_distance")
    )
    return sorted(tuple(r) for r in rows.collect())


def view_rows(runtime: Runtime) -> list[tuple[Any, ...]]:
    df = runtime.read("fares").select(*KEY, "min_fare", "max_fare", "distances")
    return sorted(tuple(r) for r in df.collect())


def epoch_changes(
    spark: SparkSession, table: DataFrame, update: str, size: int, small_rows: int
) -> tuple[DataFrame, DataFrame]:
    """The changes of one update kind (rows with ``_diff``), and the table after them."""
    rows: list[tuple[Any, ...]]
    if update == "retract_min":
        r = extreme_row(table, ascending=True)
        rows = [(r["trip_id"], r["passenger_count"], r["fare_amount"], r["trip_distance"], -1)]
    elif update == "insert_min":
        r = extreme_row(table, ascending=True)
        new_id = size + len(SMALL_GROUPS) * small_rows
        rows = [(new_id, BIG_GROUP, r["fare_amount"] - 0.5, 1.23, 1)]
    else:
        low, high = extreme_row(table, True), extreme_row(table, False)
        middle = table.where(
            (F.col("passenger_count") == BIG_GROUP)
            & (F.col("fare_amount") > low["fare_amount"])
            & (F.col("fare_amount") < high["fare_amount"])
        )
        r = middle.orderBy("trip_id").limit(1).collect()[0].asDict()
        rows = [(r["trip_id"], r["passenger_count"], r["fare_amount"], r["trip_distance"], -1)]
    schema = StructType([*SCHEMA.fields, StructField(DIFF, LongType(), False)])
    changes = spark.createDataFrame(rows, schema)
    retracted = changes.where(F.col(DIFF) < 0).select("trip_id")
    inserted = changes.where(F.col(DIFF) > 0).drop(DIFF)
    after = table.join(retracted, "trip_id", "left_anti").unionByName(inserted)
    return changes, after


def run_size(spark: SparkSession, cfg: BenchConfig, root: Path, size: int) -> dict[str, Any]:
    runtimes = {v: build(spark, root / f"n{size}", v)[0] for v in VARIANTS}
    table = initial_table(spark, size, cfg.small_group_rows).cache()
    table.count()
    result: dict[str, Any] = {"group_size": size, "epochs": {}}
    load: dict[str, Any] = {}
    for variant, rt in runtimes.items():
        started = time.perf_counter()
        rt.append_source("trips", table, 0)
        appended = time.perf_counter()
        rt.run()
        done = time.perf_counter()
        load[variant] = {
            "append_seconds": round(appended - started, 3),
            "run_seconds": round(done - appended, 3),
            "records_stored": sum(rt.trace(x).state.records for x in rt.stateful_nodes()),
            "traces": len(rt.stateful_nodes()),
        }
        print(f"  n={size} {variant:>12} load: {load[variant]}", flush=True)
    result["load"] = load
    check(runtimes, table, "load")
    for epoch, update in enumerate(UPDATES, start=1):
        changes, after = epoch_changes(spark, table, update, size, cfg.small_group_rows)
        changes = changes.cache()
        entry: dict[str, Any] = {
            "epoch": epoch,
            "changes": [r.asDict() for r in changes.collect()],
            "load_average_1min": round(os.getloadavg()[0], 1),
        }
        for variant, rt in runtimes.items():
            started = time.perf_counter()
            rt.append_source("trips", changes, epoch)
            appended = time.perf_counter()
            report = rt.run()
            done = time.perf_counter()
            assert report.profile is not None  # every run is profiled
            jobs, stages = report.profile.spark_jobs, report.profile.spark_stages
            measures = measure(rt, epoch, cfg.measure_physical)
            entry[variant] = {
                "append_seconds": round(appended - started, 3),
                "run_seconds": round(done - appended, 3),
                "spark_jobs": jobs,
                "spark_stages": stages,
                "written_total": sum(m.written for m in measures),
                "traces": [asdict(m) | {"read": m.read} for m in measures],
            }
            extremes = {m.label: (m.read, m.written) for m in measures if m.operator == "reduce"}
            print(
                f"  n={size} {variant:>12} {update:>13}: run {done - appended:.2f}s, "
                f"{jobs} jobs, measured in {time.perf_counter() - done:.1f}s, "
                f"(read, written) {extremes}",
                flush=True,
            )
        changes.unpersist()
        table.unpersist()
        table = after.cache()
        table.count()
        check(runtimes, table, update)
        result["epochs"][update] = entry
    table.unpersist()
    return result


def check(runtimes: dict[str, Runtime], table: DataFrame, label: str) -> None:
    expected = expected_view(table)
    for variant, rt in runtimes.items():
        got = view_rows(rt)
        if got != expected:
            raise AssertionError(f"{variant} after {label}: {got} != {expected}")


# ------------------------------------------------------------------ driver


def run_benchmark(spark: SparkSession, cfg: BenchConfig, root: Path) -> dict[str, Any]:
    started = time.perf_counter()
    sizes = []
    for size in cfg.sizes:
        sizes.append(run_size(spark, cfg, root, size))
        write_json(NAME, assemble(spark, cfg, sizes, time.perf_counter() - started, complete=False))
    return assemble(spark, cfg, sizes, time.perf_counter() - started, complete=True)


def assemble(
    spark: SparkSession,
    cfg: BenchConfig,
    sizes: list[dict[str, Any]],
    seconds: float,
    complete: bool,
) -> dict[str, Any]:
    return {
        "benchmark": NAME,
        "complete": complete,
        "argv": recorded_argv(),
        "config": asdict(cfg),
        "environment": environment(spark),
        "wall_seconds": round(seconds, 1),
        "sizes": sizes,
    }


def reduction_series(
    result: dict[str, Any], update: str, variant: str, field: str
) -> dict[str, list[tuple[int, int]]]:
    """label -> [(group size, value)] for the MIN/MAX reductions of one variant."""
    series: dict[str, list[tuple[int, int]]] = {}
    for s in sorted(result["sizes"], key=lambda s: s["group_size"]):
        if update not in s["epochs"]:
            continue
        for t in s["epochs"][update][variant]["traces"]:
            if t["operator"] == "reduce" and t["label"].split()[0] in ("min", "max"):
                value = t[field]
                if value is not None:
                    series.setdefault(t["label"], []).append((s["group_size"], value))
    return series


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(14, 9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    plot_records(axes[0][0], result, "retract_min", "read", "records read, retracting the minimum")
    plot_records(
        axes[0][1], result, "retract_min", "written", "records written, retracting the minimum"
    )
    plot_records(
        axes[1][0],
        result,
        "retract_min",
        "input_file_rows_scanned",
        "rows in the input files a lookup opens, retracting the minimum",
    )
    plot_times(axes[1][1], result)
    fig.suptitle("MIN/MAX over one growing group: hierarchical (solid) vs flat (dashed) reductions")
    fig.savefig(path, dpi=110)


def plot_records(ax: Axes, result: dict[str, Any], update: str, field: str, title: str) -> None:
    for variant, style in (("hierarchical", "-"), ("flat", "--")):
        series = reduction_series(result, update, variant, field)
        levels = {k: v for k, v in sorted(series.items()) if k.startswith("min")}
        for label, points in levels.items():
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, [max(y, 0.8) for y in ys], style, marker="o", label=f"{variant}: {label}")
        if variant == "hierarchical" and len(levels) > 1:
            totals: dict[int, int] = {}
            for points in levels.values():
                for x, y in points:
                    totals[x] = totals.get(x, 0) + y
            xs, ys = zip(*sorted(totals.items()), strict=True)
            ax.plot(xs, ys, "k-", linewidth=2, alpha=0.4, label="hierarchical: all MIN levels")
    sizes = sorted(s["group_size"] for s in result["sizes"])
    ax.plot(sizes, sizes, "k:", label="group size")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows in the big group")
    ax.set_ylabel("records")
    ax.set_title(title)
    ax.legend(fontsize=8)


def plot_times(ax: Axes, result: dict[str, Any]) -> None:
    colors = {"retract_min": "tab:blue", "insert_min": "tab:green", "retract_other": "tab:gray"}
    for variant, style in (("hierarchical", "-"), ("flat", "--")):
        for update in UPDATES:
            done = [s for s in result["sizes"] if update in s["epochs"]]
            done.sort(key=lambda s: s["group_size"])
            xs = [s["group_size"] for s in done]
            ys = [s["epochs"][update][variant]["run_seconds"] for s in done]
            ax.plot(xs, ys, style, color=colors[update], marker="o", label=f"{variant}: {update}")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("rows in the big group")
    ax.set_ylabel("seconds")
    ax.set_title("Runtime.run() of the update epoch (whole query)")
    ax.legend(fontsize=8)


# ------------------------------------------------------------------ CLI


def parse_args(argv: list[str]) -> tuple[BenchConfig, Path | None, bool]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--sizes",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=(1_000, 10_000, 100_000, 1_000_000),
        help="rows of the big group, comma-separated (default 1000,10000,100000,1000000)",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: sizes 1000,10000")
    p.add_argument("--small-group-rows", type=int, default=100, help="rows of each small group")
    p.add_argument(
        "--no-physical",
        action="store_true",
        help="skip counting stored updates and scanned file rows of each lookup",
    )
    p.add_argument("--workdir", type=Path, default=None, help="where scratch warehouses go")
    p.add_argument("--keep", action="store_true", help="keep the scratch warehouses")
    a = p.parse_args(argv)
    sizes = (1_000, 10_000) if a.quick else a.sizes
    cfg = BenchConfig(
        sizes=sizes, small_group_rows=a.small_group_rows, measure_physical=not a.no_physical
    )
    return cfg, a.workdir, a.keep


def main(argv: list[str] | None = None) -> None:
    cfg, workdir, keep = parse_args(sys.argv[1:] if argv is None else argv)
    run_recorded(
        NAME,
        lambda spark, root: run_benchmark(spark, cfg, root),
        plot,
        workdir,
        keep,
        count_jobs=True,
    )


if __name__ == "__main__":
    main()
