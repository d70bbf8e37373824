"""Benchmark: an incremental run against a full recompute and plain Spark SQL.

The question a data engineer asks of dd_etl: for a change of a given size, is
maintaining the views cheaper than computing them again? One process, one
SparkSession, one synthetic taxi-trips table (``--rows``, default 1 M) with a
265-row zone dimension, and three views typical of data engineering:

* ``zone_stats``: GROUP BY pickup zone with COUNT, SUM, AVG, MIN, MAX;
* ``borough_revenue``: trips joined with the zones, then GROUP BY borough;
* ``routes``: SELECT DISTINCT pickup zone, dropoff zone.

After the initial load (epoch 0), each later epoch changes a fraction of the
trips (0.01 %, 0.1 %, 1 %, 10 %; 40 % inserts, 40 % updates as retraction +
insertion, 20 % deletes). Per epoch the benchmark times

* ``incremental``: ``Runtime.run()`` for that epoch (and, separately, the
  append of the changes to the source trace);
* ``recompute``: ``dd_etl.runtime.recompute`` of every view at that epoch,
  written to Spark's ``noop`` sink so it runs in full;
* ``spark_sql``: the same views as Spark SQL over the current trips table kept
  as parquet (what one would run without dd_etl); applying the changes to that
  table (anti-join + union, rewritten) is timed separately;
* ``sdp``: one refresh of a Spark Declarative Pipeline holding the same views as
  materialized views over that same table, on a local Spark Connect server
  (``sdp_peer.py``; ``--no-sdp`` leaves it out).

It records the Spark jobs, stages and seconds of every incremental run from the
run's own profile, with the interval's sizing and the seconds per phase and,
unless ``--no-breakdown``, per trace; and for the incremental run, Spark SQL and
SDP alike the jobs, stages and bytes read and written that Spark's status store
saw (``spark_metrics.py``). At the end it checks that every view, and every SDP
materialized view, equals its Spark SQL result. Results go to
``bench/results/incremental.json`` and ``bench/results/incremental.png``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from common import RESULTS, environment, recorded_argv, run_recorded, write_json
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from sdp_peer import SdpPeer
from spark_metrics import SessionJobs, measured

from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.plan import nodes as n
from dd_etl.profiling import LAYERS, Profiler
from dd_etl.runtime import Runtime, execution
from dd_etl.runtime.recompute import recompute
from dd_etl.spark import DEFAULT_CONF, DRIVER_GC
from dd_etl.trace.columns import DIFF

NAME = "incremental"
ZONES = 265
BOROUGHS = ("Manhattan", "Brooklyn", "Queens", "Bronx", "Staten Island", "EWR")
MIX = {"insert": 0.4, "update": 0.4, "delete": 0.2}
"""Shares of the changed trips per epoch; an update is a retraction plus an insertion."""

TRIPS = StructType(
    [
        StructField("trip_id", LongType(), False),
        StructField("pickup_zone", IntegerType(), False),
        StructField("dropoff_zone", IntegerType(), False),
        StructField("passenger_count", IntegerType(), False),
        StructField("payment_type", IntegerType(), False),
        StructField("trip_distance", DoubleType(), False),
        StructField("fare_amount", DoubleType(), False),
        StructField("tip_amount", DoubleType(), False),
    ]
)
ZONE_SCHEMA = StructType(
    [
        StructField("zone_id", IntegerType(), False),
        StructField("borough", StringType(), False),
        StructField("zone_name", StringType(), False),
    ]
)
PEER_SQL = {
    "zone_stats": """
        SELECT pickup_zone, COUNT(*) AS trips, SUM(fare_amount) AS revenue,
               AVG(trip_distance) AS avg_distance,
               MIN(fare_amount) AS min_fare, MAX(fare_amount) AS max_fare
        FROM trips GROUP BY pickup_zone""",
    "borough_revenue": """
        SELECT z.borough, COUNT(*) AS trips, SUM(t.fare_amount + t.tip_amount) AS revenue,
               AVG(t.tip_amount) AS avg_tip
        FROM trips t JOIN zones z ON t.pickup_zone = z.zone_id GROUP BY z.borough""",
    "routes": "SELECT DISTINCT pickup_zone, dropoff_zone FROM trips",
}
VIEW_KEYS = {"zone_stats": ["pickup_zone"], "borough_revenue": ["borough"], "routes": []}


@dataclass(frozen=True)
class BenchConfig:
    rows: int
    fractions: tuple[float, ...]
    repeats: int
    seed: int
    breakdown: bool
    sdp: bool = True
    recompute: bool = True
    memory: str = "4g"
    sdp_memory: str | None = None  # the SDP server's driver memory; None: ``memory``


# ------------------------------------------------------------------ data


def unit(seed: int, *cols: Column) -> Column:
    """A uniform value in (0, 1] hashed from ``cols``: rows are a function of their ids."""
    bits = F.xxhash64(*cols, F.lit(seed)).bitwiseAND((1 << 52) - 1)
    return (bits.cast("double") + 1.0) / float(1 << 52)


def trip_rows(ids: DataFrame) -> DataFrame:
    """The trips for ``(trip_id, version)`` rows (other columns pass through).

    The route and passengers follow the trip id; distance, fare and tip follow
    the version too, so an update (a new version) is a fare correction."""
    tid, ver = F.col("trip_id"), F.col("version")
    distance = F.round(F.lit(0.3) - F.lit(2.8) * F.log(unit(13, tid, ver)), 2)
    fare = F.round(F.lit(3.0) + F.lit(2.5) * distance - F.lit(4.0) * F.log(unit(14, tid, ver)), 2)
    passengers = F.least(F.lit(6), F.floor(-F.log(unit(15, tid)) * F.lit(0.8)) + 1)
    extra = [c for c in ids.columns if c not in ("trip_id", "version")]
    return ids.select(
        tid.alias("trip_id"),
        (F.pmod(F.xxhash64(tid, F.lit(11)), F.lit(ZONES)) + 1).cast("int").alias("pickup_zone"),
        (F.pmod(F.xxhash64(tid, F.lit(12)), F.lit(ZONES)) + 1).cast("int").alias("dropoff_zone"),
        passengers.cast("int").alias("passenger_count"),
        (F.pmod(F.xxhash64(tid, F.lit(16)), F.lit(4)) + 1).cast("int").alias("payment_type"),
        distance.alias("trip_distance"),
        fare.alias("fare_amount"),
        F.round(fare * F.lit(0.3) * unit(17, tid, ver), 2).alias("tip_amount"),
        *extra,
    )


def zone_table(spark: SparkSession) -> DataFrame:
    rows = [(z, BOROUGHS[(z * 7) % len(BOROUGHS)], f"zone {z}") for z in range(1, ZONES + 1)]
    return spark.createDataFrame(rows, ZONE_SCHEMA)


class Changes:
    """The live trips as versions per id, and seeded epochs of changes to them."""

    def __init__(self, rows: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.version = np.zeros(rows, dtype=np.int64)  # -1: deleted
        self.size = rows

    def epoch(self, count: int) -> tuple[pd.DataFrame, dict[str, int]]:
        """``count`` changed trips as ``(trip_id, version, _diff)`` rows."""
        inserts = round(count * MIX["insert"])
        deletes = round(count * MIX["delete"])
        updates = count - inserts - deletes
        live = np.flatnonzero(self.version[: self.size] >= 0)
        chosen = self.rng.choice(live, size=updates + deletes, replace=False)
        updated, deleted = chosen[:updates], chosen[updates:]
        new_ids = np.arange(self.size, self.size + inserts)
        self._grow(self.size + inserts)
        old = self.version[chosen]
        self.version[updated] += 1
        self.version[deleted] = -1
        self.size += inserts
        frame = pd.DataFrame(
            {
                "trip_id": np.concatenate([chosen, updated, new_ids]),
                "version": np.concatenate([old, self.version[updated], np.zeros(inserts, int)]),
                DIFF: np.concatenate([-np.ones(len(chosen), int), np.ones(updates + inserts, int)]),
            }
        ).astype("int64")
        return frame, {"inserts": inserts, "updates": updates, "deletes": deletes}

    def _grow(self, size: int) -> None:
        if size > len(self.version):
            extra = np.zeros(max(size - len(self.version), len(self.version) // 4), np.int64)
            self.version = np.concatenate([self.version, extra])


# ------------------------------------------------------------------ views


def build_flow(spark: SparkSession, root: Path) -> Runtime:
    flow = Dataflow(spark, root / "warehouse", name=NAME)
    trips = flow.source("trips", TRIPS, key=["trip_id"])
    zones = flow.source("zones", ZONE_SCHEMA, key=["zone_id"])
    flow.view(
        "zone_stats",
        trips.aggregate(
            ["pickup_zone"],
            trips=agg.count(),
            revenue=agg.sum_("fare_amount"),
            avg_distance=agg.avg("trip_distance"),
            min_fare=agg.min_("fare_amount"),
            max_fare=agg.max_("fare_amount"),
        ),
    )
    joined = trips.join(zones, left_on=["pickup_zone"], right_on=["zone_id"])
    flow.view(
        "borough_revenue",
        joined.aggregate(
            ["borough"],
            trips=agg.count(),
            revenue=agg.sum_("fare_amount + tip_amount"),
            avg_tip=agg.avg("tip_amount"),
        ),
    )
    flow.view("routes", trips.select("pickup_zone", "dropoff_zone").distinct())
    return Runtime(flow)


# ------------------------------------------------------------------ Spark jobs


def cost(report: execution.RunReport, breakdown: bool) -> dict[str, Any]:
    """Seconds, Spark jobs, stages, tasks and task time of a run as the runtime's own
    profile recorded them (and, with ``breakdown``, per layer and per trace, with
    each trace's part of its layer's shared jobs: ``RunProfile``)."""
    profile = report.profile
    assert profile is not None
    out: dict[str, Any] = {
        "seconds": profile.seconds,
        "spark_jobs": profile.spark_jobs,
        "spark_stages": profile.spark_stages,
        "tasks": profile.tasks,
        "task_seconds": profile.task_seconds,
        "bytes_shuffled": profile.bytes_shuffled,
        "sizing": profile.sizing,
        "phases": profile.phases,
    }
    if breakdown:
        layers = zip(profile.layers, profile.layer_traces, strict=True)
        out["layers"] = [{"sizing": s, "traces": t} for s, t in layers]
        out["by_trace"] = {name: asdict(c) for name, c in profile.traces.items()}
        out["profile_lines"] = profile.lines()
    return out


def operator_of(runtime: Runtime) -> dict[str, str]:
    """trace name -> what kind of operator keeps it (MIN/MAX levels numbered)."""
    kinds: dict[str, str] = {}
    for node in runtime.stateful_nodes():
        name = node.trace_name or node.id
        if isinstance(node, n.Reduce):
            kind: str = node.kind
            if kind in ("min", "max", "min_max"):
                kind = "min/max level" if "__bucket" in node.key else "min/max top"
            kinds[name] = f"reduce {kind}"
        else:
            kinds[name] = type(node).__name__.lower()
    return kinds


# ------------------------------------------------------------------ the three ways


def timed(block: Callable[[], object]) -> float:
    started = time.perf_counter()
    block()
    return round(time.perf_counter() - started, 3)


def executed(df: DataFrame) -> float:
    """Seconds to run ``df`` in full: Spark's ``noop`` sink computes every row, stores none."""
    return timed(lambda: df.write.format("noop").mode("overwrite").save())


def run_recompute(cfg: BenchConfig, runtime: Runtime, epoch: int) -> dict[str, float]:
    """Each view recomputed in full, unless ``cfg`` leaves recomputes out (at 100 M
    trips one takes minutes, and Spark SQL is the peer that counts): then none."""
    if not cfg.recompute:
        return {}
    return {view: executed(recompute(runtime, view, epoch)) for view in runtime.flow.views}


def recompute_line(entry: dict[str, Any]) -> str:
    done = entry["recompute"]
    return f"recompute {sum(done.values()):.1f}s, " if done else ""


def run_peer(spark: SparkSession) -> dict[str, float]:
    return {view: executed(spark.sql(sql)) for view, sql in PEER_SQL.items()}


def measured_peer(
    spark: SparkSession, jobs: SessionJobs
) -> tuple[dict[str, float], dict[str, Any]]:
    """Spark SQL's seconds per view, and the three views' seconds and Spark work together."""
    per_view, seconds, work = measured(jobs, lambda: run_peer(spark))
    return per_view, {"seconds": seconds, **work.to_json()}


def measured_run(
    rt: Runtime, jobs: SessionJobs, breakdown: bool
) -> tuple[execution.RunReport, dict[str, Any]]:
    """``rt.run()``: its profile's cost, and the bytes Spark's stages read and wrote
    (input and output bytes, as for Spark SQL: ``bytes_read``, ``bytes_written``)
    beside the profile's own count of batch-file bytes (``profile_bytes_*``: its
    reads also count the files the driver opened itself, its writes every
    commit's batch files, whoever wrote them)."""
    with Profiler(rt.flow.spark, operators=breakdown).active() as profiler:
        report, _, work = measured(jobs, rt.run)
    report.profile = profiler.result()  # its seconds without splitting shared jobs
    return report, cost(report, breakdown) | {
        "bytes_read": work.bytes_read,
        "bytes_written": work.bytes_written,
        "shuffle_read_bytes": work.shuffle_read_bytes,
        "shuffle_write_bytes": work.shuffle_write_bytes,
        "status_store_jobs": work.spark_jobs,
        "profile_bytes_read": report.profile.bytes_read,
        "profile_bytes_written": report.profile.bytes_written,
    }


class PeerTable:
    """The trips table as a data engineer without dd_etl keeps it: parquet, rewritten
    with each epoch's changes applied (anti-join on the changed ids + new rows)."""

    def __init__(self, spark: SparkSession, root: Path) -> None:
        self.spark = spark
        self.root = root
        self.path: Path | None = None

    def replace(self, df: DataFrame, epoch: int) -> None:
        path = self.root / f"trips_e{epoch}"
        df.write.parquet(str(path))
        self.spark.read.parquet(str(path)).createOrReplaceTempView("trips")
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self.path = path

    def apply(self, changes: DataFrame, epoch: int) -> None:
        assert self.path is not None
        current = self.spark.read.parquet(str(self.path))
        gone = changes.where(F.col(DIFF) < 0).select("trip_id")
        new = changes.where(F.col(DIFF) > 0).select(*TRIPS.fieldNames())
        self.replace(current.join(gone, "trip_id", "left_anti").unionByName(new), epoch)


def start_sdp(spark: SparkSession, root: Path, memory: str) -> SdpPeer:
    """The SDP peer's Connect server, set up as the benchmark's session is (master,
    SQL settings, garbage collector; driver memory ``memory``), so the two peers differ in how
    they run the views, not in the Spark they run on."""
    conf = spark.sparkContext.getConf()
    keys = [*DEFAULT_CONF, "spark.sql.shuffle.partitions", "spark.default.parallelism"]
    settings = {k: str(conf.get(k)) for k in keys if conf.contains(k)}
    settings["spark.driver.extraJavaOptions"] = DRIVER_GC
    return SdpPeer(
        root / "sdp",
        PEER_SQL,
        master=str(spark.sparkContext.master),
        driver_memory=memory,
        conf=settings,
    )


# ------------------------------------------------------------------ driver


def run_benchmark(
    spark: SparkSession, cfg: BenchConfig, root: Path, results: Path
) -> dict[str, Any]:
    """Start the SDP peer's server (unless ``cfg.sdp`` is off), run, stop it."""
    with ExitStack() as stack:
        memory = cfg.sdp_memory or cfg.memory
        sdp = stack.enter_context(start_sdp(spark, root, memory)) if cfg.sdp else None
        return run_epochs(spark, cfg, root, results, sdp)


def run_epochs(
    spark: SparkSession, cfg: BenchConfig, root: Path, results: Path, sdp: SdpPeer | None
) -> dict[str, Any]:
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    rt = build_flow(spark, root)
    kinds = operator_of(rt)
    peer = PeerTable(spark, root / "peer")
    changes = Changes(cfg.rows, cfg.seed)
    jobs = SessionJobs(spark)
    started = time.perf_counter()

    base = trip_rows(
        spark.range(cfg.rows, numPartitions=2).select(
            F.col("id").alias("trip_id"), F.lit(0).cast("long").alias("version")
        )
    )
    zones = zone_table(spark)
    zones.cache().createOrReplaceTempView("zones")
    no_zone_changes = zones.limit(0)  # the dimension's epochs must advance with the trips
    load: dict[str, Any] = {"peer_write_seconds": timed(lambda: peer.replace(base, 0))}
    trips0 = spark.read.parquet(str(peer.path))
    load["append_seconds"] = timed(
        lambda: (rt.append_source("trips", trips0, 0), rt.append_source("zones", zones, 0))
    )
    load["incremental"] = measured_run(rt, jobs, cfg.breakdown)[1]
    load["recompute"] = run_recompute(cfg, rt, 0)
    load["spark_sql"], load["spark_sql_work"] = measured_peer(spark, jobs)
    if sdp is not None:
        assert peer.path is not None
        zones_path = root / "peer" / "zones"
        zones.write.parquet(str(zones_path))
        load["sdp_server_start_seconds"] = sdp.start_seconds
        load["sdp_table_seconds"] = sdp.point("zones", zones_path) + sdp.point("trips", peer.path)
        load["sdp"] = sdp.refresh().to_json()
    load["traces"] = len(rt.stateful_nodes())
    inc = load["incremental"]
    print(
        f"load of {cfg.rows:,} trips: incremental {inc['seconds']}s ({inc['spark_jobs']} jobs), "
        + recompute_line(load)
        + f"spark sql {sum(load['spark_sql'].values()):.1f}s"
        + (f", sdp {load['sdp']['seconds']:.1f}s" if sdp is not None else ""),
        flush=True,
    )

    epochs: list[dict[str, Any]] = []
    epoch = 0
    for repeat in range(cfg.repeats):
        for fraction in cfg.fractions:
            epoch += 1
            count = max(1, round(cfg.rows * fraction))
            frame, ops = changes.epoch(count)
            df = trip_rows(spark.createDataFrame(frame)).cache()
            updates = df.count()
            entry: dict[str, Any] = {
                "epoch": epoch,
                "repeat": repeat,
                "fraction": fraction,
                "changed_trips": count,
                "update_rows": updates,
                "ops": ops,
                "load_average_1min": round(os.getloadavg()[0], 1),
            }
            ingest = time.perf_counter()
            rt.append_source("trips", df, epoch)
            rt.append_source("zones", no_zone_changes, epoch)
            entry["append_seconds"] = round(time.perf_counter() - ingest, 3)
            report, entry["incremental"] = measured_run(rt, jobs, cfg.breakdown)
            entry["incremental"]["view_changes"] = report.views
            entry["recompute"] = run_recompute(cfg, rt, epoch)
            applying = time.perf_counter()
            peer.apply(df, epoch)
            entry["peer_apply_seconds"] = round(time.perf_counter() - applying, 3)
            entry["spark_sql"], entry["spark_sql_work"] = measured_peer(spark, jobs)
            if sdp is not None:
                assert peer.path is not None
                entry["sdp_table_seconds"] = sdp.point("trips", peer.path)
                entry["sdp"] = sdp.refresh().to_json()
            df.unpersist()
            epochs.append(entry)
            inc, sql = entry["incremental"], entry["spark_sql_work"]
            print(
                f"epoch {epoch} ({fraction:.2%}, {updates:,} update rows): "
                f"incremental {inc['seconds']}s ({inc['spark_jobs']} jobs, "
                f"{inc['spark_stages']} stages, {mb(inc['profile_bytes_read'])} read, "
                f"{mb(inc['profile_bytes_written'])} written), "
                + recompute_line(entry)
                + f"spark sql {sql['seconds']}s ({sql['spark_jobs']} jobs, "
                f"{mb(sql['bytes_read'])} read)" + sdp_line(entry.get("sdp")),
                flush=True,
            )
            write_json(
                NAME, assemble(spark, cfg, load, epochs, kinds, None, started, False), results
            )
    verification = verify(spark, rt.read)
    print(f"verification: {verification}", flush=True)
    sdp_verification = None if sdp is None else verify(spark, sdp.read)
    if sdp_verification is not None:
        print(f"sdp verification: {sdp_verification}", flush=True)
    return assemble(spark, cfg, load, epochs, kinds, verification, started, True, sdp_verification)


def mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def sdp_line(sdp: dict[str, Any] | None) -> str:
    if sdp is None:
        return ""
    return (
        f", sdp {sdp['seconds']}s ({sdp['spark_jobs']} jobs, {mb(sdp['bytes_read'])} read, "
        f"{mb(sdp['bytes_written'])} written)"
    )


def verify(spark: SparkSession, read: Callable[[str], DataFrame]) -> dict[str, Any]:
    """Every view as ``read`` gives it equals its Spark SQL query over the current
    table (floats to 1e-7 relative)."""
    out: dict[str, Any] = {}
    for view, sql in PEER_SQL.items():
        got = rows_by_key(read(view), VIEW_KEYS[view])
        expected = rows_by_key(spark.sql(sql), VIEW_KEYS[view])
        if got.keys() != expected.keys():
            raise AssertionError(f"{view}: groups differ ({len(got)} vs {len(expected)})")
        for k, row in expected.items():
            for column, value in row.items():
                mine = got[k][column]
                if not close(mine, value):
                    raise AssertionError(f"{view} {k} {column}: {mine} != {value}")
        out[view] = {"rows": len(got), "equal": True}
    return out


def rows_by_key(df: DataFrame, key: list[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in df.collect():
        d = r.asDict()
        k = tuple(d[c] for c in key) if key else tuple(d.values())
        if k in rows:
            raise AssertionError(f"duplicate row for {k}")
        rows[k] = d
    return rows


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-7, abs_tol=1e-6)
    return bool(a == b)


def summarize(epochs: list[dict[str, Any]], fractions: tuple[float, ...]) -> list[dict[str, Any]]:
    """Medians per change size; ratios of recompute and Spark SQL to incremental."""
    out = []
    for fraction in fractions:
        chosen = [e for e in epochs if e["fraction"] == fraction]
        if not chosen:
            continue
        inc = statistics.median(e["incremental"]["seconds"] for e in chosen)
        recomputed = [sum(e["recompute"].values()) for e in chosen if e["recompute"]]
        rec = statistics.median(recomputed) if recomputed else None
        sql = statistics.median(sum(e["spark_sql"].values()) for e in chosen)
        out.append(
            {
                "fraction": fraction,
                "changed_trips": chosen[0]["changed_trips"],
                "update_rows": chosen[0]["update_rows"],
                "repeats": len(chosen),
                "incremental_seconds": inc,
                "incremental_min": min(e["incremental"]["seconds"] for e in chosen),
                "incremental_max": max(e["incremental"]["seconds"] for e in chosen),
                "append_seconds": statistics.median(e["append_seconds"] for e in chosen),
                "recompute_seconds": rec,
                "spark_sql_seconds": sql,
                "peer_apply_seconds": statistics.median(e["peer_apply_seconds"] for e in chosen),
                "spark_jobs": statistics.median(e["incremental"]["spark_jobs"] for e in chosen),
                "spark_stages": statistics.median(e["incremental"]["spark_stages"] for e in chosen),
                "recompute_over_incremental": None if rec is None else round(rec / inc, 3),
                "spark_sql_over_incremental": round(sql / inc, 3),
                **work_medians(chosen, inc),
            }
        )
    return out


def work_medians(chosen: list[dict[str, Any]], incremental: float) -> dict[str, Any]:
    """Medians of the Spark work of each block (``None`` where it was not measured),
    and SDP's refresh time (and its ratio to the incremental run's) where it ran."""
    blocks = {"incremental": "incremental", "spark_sql": "spark_sql_work", "sdp": "sdp"}
    out: dict[str, Any] = {}
    for name, key in blocks.items():
        for metric in ("spark_jobs", "spark_stages", "bytes_read", "bytes_written"):
            if name == "incremental" and metric in ("spark_jobs", "spark_stages"):
                continue  # the summary's ``spark_jobs``, ``spark_stages``
            # a run's own count: Spark's stages see neither the driver's reads and
            # writes nor the executors' batch files written with pyarrow
            field = f"profile_{metric}" if name == "incremental" else metric
            values = [e[key][field] for e in chosen if field in e.get(key, {})]
            label = metric.removeprefix("spark_")
            out[f"{name}_{label}"] = statistics.median(values) if values else None
    sdp = [e["sdp"]["seconds"] for e in chosen if "sdp" in e]
    out["sdp_seconds"] = statistics.median(sdp) if sdp else None
    out["sdp_over_incremental"] = round(out["sdp_seconds"] / incremental, 3) if sdp else None
    return out


def breakdown_by_operator(
    epochs: list[dict[str, Any]], kinds: dict[str, str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Per change size, per operator kind: the median over repeats of its traces'
    summed seconds (their threads' wall time), Spark jobs, driver planning and task
    time. A trace's task time is that of its own jobs plus what the executed plans
    of its layer's shared jobs say its part took; what those jobs took beside the
    parts (the union's sort and write, a task's start and its reads) is ``layer
    jobs``'s, so that the kinds add up to the run's task time."""
    per: dict[float, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for e in epochs:
        totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for trace, m in e["incremental"].get("by_trace", {}).items():
            kind = "layer jobs" if trace.startswith(f"{LAYERS}/") else kinds.get(trace, "other")
            t = totals[kind]
            t["seconds"] += m["seconds"]
            t["spark_jobs"] += m["spark_jobs"] or 0
            t["planning"] += m["phases"].get("planning", 0.0)
            t["task_seconds"] += m["task_seconds"] or 0.0
            parts = part_seconds(m.get("shared"))
            t["task_seconds"] += parts
            totals["layer jobs"]["task_seconds"] -= parts
        for kind, t in totals.items():
            per[e["fraction"]][kind].append(t)
    return {
        str(f): {
            kind: {"traces": sum(1 for k in kinds.values() if k == kind)}
            | {
                measure: round(statistics.median(v[measure] for v in vals), 3)
                for measure in ("seconds", "spark_jobs", "planning", "task_seconds")
            }
            for kind, vals in sorted(kinds_.items())
        }
        for f, kinds_ in per.items()
    }


def part_seconds(shared: dict[str, Any] | None) -> float:
    """The task time a trace's part of shared jobs took, as their plans say."""
    return 0.0 if shared is None else float(shared["task_seconds"])


def assemble(
    spark: SparkSession,
    cfg: BenchConfig,
    load: dict[str, Any],
    epochs: list[dict[str, Any]],
    kinds: dict[str, str],
    verification: dict[str, Any] | None,
    started: float,
    complete: bool,
    sdp_verification: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "benchmark": NAME,
        "complete": complete,
        "argv": recorded_argv(),
        "config": asdict(cfg),
        "environment": environment(
            spark,
            shuffle_partitions=spark.conf.get("spark.sql.shuffle.partitions"),
            parallel_traces=execution.PARALLEL_TRACES,
        ),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "peer_sql": {k: " ".join(v.split()) for k, v in PEER_SQL.items()},
        "load": load,
        "summary": summarize(epochs, cfg.fractions),
        "breakdown_by_operator": breakdown_by_operator(epochs, kinds),
        "trace_operators": kinds,
        "epochs": epochs,
        "verification": verification,
        "sdp_verification": sdp_verification,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(16, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    plot_times(axes[0], result)
    plot_jobs(axes[1], result)
    plot_breakdown(axes[2], result)
    cfg = result["config"]
    peers = "Spark SQL vs SDP" if cfg.get("sdp") else "Spark SQL"
    if cfg.get("recompute", True):
        peers = f"full recompute vs {peers}"
    fig.suptitle(
        f"{cfg['rows']:,} trips, 3 views: incremental run vs {peers} (medians of {cfg['repeats']})"
    )
    fig.savefig(path, dpi=110)


def plot_times(ax: Axes, result: dict[str, Any]) -> None:
    rows = result["summary"]
    xs = [100 * r["fraction"] for r in rows]
    inc = [r["incremental_seconds"] for r in rows]
    err = [
        [r["incremental_seconds"] - r["incremental_min"] for r in rows],
        [r["incremental_max"] - r["incremental_seconds"] for r in rows],
    ]
    ax.errorbar(xs, inc, yerr=err, marker="o", capsize=3, label="incremental Runtime.run()")
    if all(r["recompute_seconds"] is not None for r in rows):
        ax.plot(xs, [r["recompute_seconds"] for r in rows], marker="s", label="full recompute")
    ax.plot(xs, [r["spark_sql_seconds"] for r in rows], marker="^", label="Spark SQL batch")
    ax.plot(
        xs,
        [r["spark_sql_seconds"] + r["peer_apply_seconds"] for r in rows],
        marker="^",
        linestyle=":",
        label="Spark SQL + rewriting the table",
    )
    if all(r.get("sdp_seconds") is not None for r in rows):
        sdp = [r["sdp_seconds"] for r in rows]
        ax.plot(xs, sdp, marker="D", label="SDP pipeline refresh (materialized views)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("changed trips (% of the table)")
    ax.set_ylabel("seconds")
    ax.set_title("time to bring the three views up to date")
    ax.legend(fontsize=8)


def plot_jobs(ax: Axes, result: dict[str, Any]) -> None:
    rows = result["summary"]
    xs = [100 * r["fraction"] for r in rows]
    ax.plot(xs, [r["spark_jobs"] for r in rows], marker="o", label="Spark jobs")
    ax.plot(xs, [r["spark_stages"] for r in rows], marker="s", label="stages (incl. skipped)")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("changed trips (% of the table)")
    ax.set_title("Spark jobs of one incremental run")
    ax.legend(fontsize=8)


def plot_breakdown(ax: Axes, result: dict[str, Any]) -> None:
    per = result["breakdown_by_operator"]
    if not per:
        ax.set_title("no per-trace breakdown recorded")
        return
    fractions = sorted(per, key=float)
    kinds = sorted({k for f in fractions for k in per[f]})
    bottom = np.zeros(len(fractions))
    labels = [f"{100 * float(f):g}%" for f in fractions]
    for kind in kinds:
        values = np.array([per[f].get(kind, {}).get("task_seconds", 0.0) for f in fractions])
        ax.bar(labels, values, bottom=bottom, label=kind)
        bottom += values
    ax.set_xlabel("changed trips")
    ax.set_ylabel("Spark task seconds (summed over tasks)")
    ax.set_title("incremental task time by operator")
    ax.legend(fontsize=7)


# ------------------------------------------------------------------ CLI


def parse_args(argv: list[str]) -> tuple[BenchConfig, Path | None, bool, Path]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rows", type=int, default=1_000_000, help="trips loaded (default 1 M)")
    p.add_argument(
        "--fractions",
        type=lambda s: tuple(float(x) for x in s.split(",")),
        default=(0.0001, 0.001, 0.01, 0.1),
        help="changed share of the trips per epoch, comma-separated",
    )
    p.add_argument("--repeats", type=int, default=3, help="epochs per change size (default 3)")
    p.add_argument("--quick", action="store_true", help="smoke run: 20,000 trips, 1 repeat")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--no-breakdown", action="store_true", help="no per-trace attribution")
    p.add_argument("--workdir", type=Path, default=None, help="where the scratch warehouse goes")
    p.add_argument("--keep", action="store_true", help="keep the scratch warehouse")
    p.add_argument(
        "--no-sdp", action="store_true", help="leave out the Spark Declarative Pipelines peer"
    )
    p.add_argument("--no-recompute", action="store_true", help="leave out dd_etl's full recomputes")
    p.add_argument("--memory", default="4g", help="the benchmark's driver memory (default 4g)")
    p.add_argument("--sdp-memory", default=None, help="the SDP server's (default: --memory)")
    p.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="where the JSON and the plot go (default bench/results)",
    )
    a = p.parse_args(argv)
    cfg = BenchConfig(
        rows=20_000 if a.quick else a.rows,
        fractions=a.fractions,
        repeats=1 if a.quick else a.repeats,
        seed=a.seed,
        breakdown=not a.no_breakdown,
        sdp=not a.no_sdp,
        recompute=not a.no_recompute,
        memory=a.memory,
        sdp_memory=a.sdp_memory,
    )
    return cfg, a.workdir, a.keep, a.results


def main(argv: list[str] | None = None) -> None:
    cfg, workdir, keep, results = parse_args(sys.argv[1:] if argv is None else argv)
    run_recorded(
        NAME,
        lambda spark, root: run_benchmark(spark, cfg, root, results),
        plot,
        workdir,
        keep,
        memory=cfg.memory,
        count_jobs=True,
        results=results,
    )


if __name__ == "__main__":
    main()
