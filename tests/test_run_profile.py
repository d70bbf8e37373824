"""A run's cost is recorded, and a small change costs a Spark job per task slot per
layer of traces.

The job counts are pinned: they are deterministic for a dataflow, its data and
its sizing, and a change that makes a small epoch launch more jobs (a counting
job, an exchange run as a job of its own) should fail here, not be found later
in a benchmark. Times are recorded, never asserted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from dd_etl.lake import Location
from dd_etl.lattice import Antichain
from dd_etl.operators import driver_extremes
from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import upstream
from dd_etl.profiling import DELTA_LOG, LOOKUPS, PHASES, SPARK, Profiler, layer_label
from dd_etl.runtime import Runtime, interval
from dd_etl.runtime.holds import RUNTIME_READER
from dd_etl.runtime.sizing import Thresholds
from dd_etl.spark_driver import driver_for
from dd_etl.trace import deferred_log
from dd_etl.trace.delta_trace import PRUNING_MIN_FILES, DeltaTrace, PlannedBatch
from tests.support.sizings import DEFAULT

pytestmark = pytest.mark.spark

TRIPS = StructType(
    [
        StructField("id", LongType(), False),
        StructField("zone", LongType(), False),
        StructField("fare", DoubleType(), False),
    ]
)
ZONES = StructType([StructField("zone", LongType(), False), StructField("borough", StringType())])
BOROUGHS = ["north", "south", "east"]


def _kind(node: n.Node) -> str | None:
    return node.kind if isinstance(node, n.Reduce) else None


def build(
    spark: SparkSession,
    warehouse: Path,
    thresholds: Thresholds = DEFAULT,
    boroughs: bool = False,
) -> Runtime:
    """The three views of ``bench_incremental``: GROUP BY with COUNT, SUM, AVG, MIN
    and MAX; a join, then GROUP BY; DISTINCT. ``boroughs``: a fourth, the zones'
    DISTINCT boroughs, whose traces no change of the trips reaches."""
    flow = Dataflow(spark, warehouse)
    trips = flow.source("trips", TRIPS, key=["id"])
    zones = flow.source("zones", ZONES, key=["zone"])
    flow.view(
        "zone_stats",
        trips.aggregate(
            ["zone"],
            trips=agg.count(),
            revenue=agg.sum_("fare"),
            avg_fare=agg.avg("fare"),
            min_fare=agg.min_("fare"),
            max_fare=agg.max_("fare"),
        ),
    )
    joined = trips.join(zones, on="zone")
    flow.view("borough_revenue", joined.aggregate(["borough"], revenue=agg.sum_("fare")))
    flow.view("routes", trips.select("zone").distinct())
    if boroughs:
        flow.view("boroughs", zones.select("borough").distinct())
    return Runtime(flow, thresholds=thresholds)


def trip(i: int, version: int = 0) -> tuple[int, int, float]:
    return (i, i % 7, float((i * 37 + version * 11) % 50 + 1))


def load(spark: SparkSession, rt: Runtime, trips: int) -> None:
    rt.append_source("trips", spark.createDataFrame([trip(i) for i in range(trips)], TRIPS), 0)
    zones = [(z, BOROUGHS[z % 3]) for z in range(7)]
    rt.append_source("zones", spark.createDataFrame(zones, ZONES), 0)


def change(spark: SparkSession, rt: Runtime, epoch: int) -> None:
    """A few trips inserted, updated (retraction + insertion) and deleted."""
    schema = StructType([*TRIPS.fields, StructField("_diff", LongType(), False)])
    rows = [(*trip(1000 + epoch), 1), (*trip(epoch), -1), (*trip(epoch, epoch), 1)]
    rows.append((*trip(50 + epoch), -1))
    rt.append_source("trips", spark.createDataFrame(rows, schema), epoch)
    rt.append_source("zones", spark.createDataFrame([], ZONES), epoch)


def expected(trips: dict[int, tuple[int, int, float]]) -> dict[str, Counter[tuple[Any, ...]]]:
    by_zone: dict[int, list[float]] = {}
    by_borough: dict[str, float] = {}
    for _, zone, fare in trips.values():
        by_zone.setdefault(zone, []).append(fare)
        by_borough[BOROUGHS[zone % 3]] = by_borough.get(BOROUGHS[zone % 3], 0.0) + fare
    stats = Counter(
        (z, len(f), sum(f), sum(f) / len(f), min(f), max(f)) for z, f in by_zone.items()
    )
    return {
        "zone_stats": stats,
        "borough_revenue": Counter(by_borough.items()),
        "routes": Counter((z,) for z in by_zone),
    }


def sources_of(node: n.Node) -> list[n.Source]:
    return [s for s in upstream([node]) if isinstance(s, n.Source)]


def contents(rt: Runtime, view: str) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r) for r in rt.read(view).collect())


def test_a_small_change_costs_a_spark_job_per_task_slot_per_layer(
    spark: SparkSession, tmp_path: Path
) -> None:
    rt = build(spark, tmp_path / "warehouse")
    load(spark, rt, 60)
    first = rt.run()
    assert first.profile is not None and first.profile.sizing == "small"

    change(spark, rt, 1)
    report = rt.run()
    profile = report.profile
    assert profile is not None
    assert profile.sizing == "small"
    maintained = {x.trace_name for x in rt.stateful_nodes()}
    # sources are read from their committed batches, and the zones did not change:
    # nothing is computed for them or for what only they feed
    only_zones = {
        x.trace_name for x in rt.stateful_nodes() if {s.name for s in sources_of(x)} == {"zones"}
    }
    # (the join looks zones up in their source's trace, keyed by zone: no arrangement)
    assert only_zones == {"sources/zones"}
    # nor for the routes view: every zone still has trips, so the counts of the
    # DISTINCT below it changed and its rows did not
    idle = only_zones | {"sources/trips", "views/routes"}
    # a Spark job per task slot (two cores: two) computes the batches of a layer's
    # traces (the routes view's, empty, too), and none computes or counts anything
    # for a trace on its own; the driver makes the MIN/MAX levels' batches itself
    levels = {x.trace_name for x in rt.stateful_nodes() if _kind(x) == "min_max"}
    unplanned = only_zones | {"sources/trips"} | levels
    layers = [{x.trace_name for x in layer} - unplanned for layer in rt.layers()]
    slots = driver_for(spark).memory().tasks
    computed = {layer_label(d): min(len(layer), slots) for d, layer in enumerate(layers) if layer}
    # a trace whose inputs did not change defers its empty append, with the
    # others', to one commit of the run's record: no work of its own
    deferred = only_zones - {"sources/zones"}
    profiled = (maintained - deferred) | set(computed)
    assert set(profile.traces) == profiled
    jobs = {name: cost.spark_jobs for name, cost in profile.traces.items()}
    assert jobs == {name: computed.get(name, 0) for name in profiled}
    assert len(computed) == 5
    assert profile.spark_jobs == sum(computed.values()) == 8
    assert len(maintained - idle) == 11
    # and each job is one stage: every read is one partition, which stays one
    # partition through the plan, so nothing is shuffled (not even behind the join
    # of joins: the driver's reads are local relations whose sizes Spark knows)
    assert {name: profile.traces[name].spark_stages for name in computed} == computed
    assert profile.spark_stages == 8
    assert set(profile.phases) == set(PHASES) - {"sinks"}
    assert all(profile.traces[t].phases[DELTA_LOG] > 0 for t in maintained - deferred)
    assert all(profile.traces[t].phases.get(SPARK, 0) > 0 for t in computed)
    # every reduction read the history of the keys it touched in the driver
    reductions = {x.trace_name for x in rt.stateful_nodes() if isinstance(x, n.Reduce)} - idle
    assert len(reductions) == 3  # the MIN/MAX levels and the collapse
    assert all(profile.traces[t].phases.get(LOOKUPS, 0) > 0 for t in reductions)
    # the files the run committed, counted by the trace that committed them
    assert all(profile.traces[t].bytes_written == 0 for t in idle - deferred)
    assert profile.bytes_written == sum(c.bytes_written for c in profile.traces.values()) > 0
    text = "\n".join(profile.lines())
    assert "8 Spark jobs" in text and "views/zone_stats" in text and "shared jobs" in text
    # what the JVM's compilers did beside the run is reported (its seconds, like
    # all seconds, never asserted)
    assert profile.jvm_compiling is not None and profile.jvm_compiling >= 0
    assert (
        "JIT compiling beside the run" in text
        and profile.to_json()["jvm_compiling"] == profile.jvm_compiling
    )
    # each job one task; the layers' traces as they ran, in order
    assert profile.tasks == 8 and profile.task_seconds is not None
    assert [set(t) - unplanned for t in profile.layer_traces] == layers
    assert all(profile.traces[t].shared is None for t in profile.traces)  # not asked for

    # asked for its operators, a run splits each layer's shared jobs among the
    # traces whose batches they computed, with no Spark job more
    change(spark, rt, 2)
    with Profiler(spark, operators=True).active() as profiler:
        assert rt.run().profile is None  # the caller's profiler's to take
    detailed = profiler.result()
    assert detailed.spark_jobs == 8
    ran = [d for d in range(len(layers)) if layer_label(d) in detailed.traces]
    in_jobs = set().union(*(layers[d] for d in ran)) - idle
    shared = {t: c.shared for t, c in detailed.traces.items() if c.shared is not None}
    assert len(in_jobs) >= 8 and in_jobs <= set(shared) <= in_jobs | set(computed) | idle
    for name in in_jobs:
        work = shared[name]
        assert work.rows > 0 and "LocalTableScan" in work.operators, (name, work)
    # the collapse's part aggregates the touched keys' history with their changes
    # (the MIN/MAX levels' batches are the driver's)
    assert reductions & in_jobs == reductions - levels != set()
    assert all("HashAggregate" in shared[t].operators for t in reductions - levels)
    # the parts and what the layer's jobs did above them add up to the jobs' task time
    for d in ran:
        jobs = detailed.traces[layer_label(d)]
        labels = [layer_label(d), *detailed.layer_traces[d]]
        parts = [detailed.traces[t].shared for t in labels if t in detailed.traces]
        timed = sum(p.task_seconds for p in parts if p is not None)
        if timed > 0:
            assert jobs.task_seconds is not None
            assert abs(timed - jobs.task_seconds) <= 0.001 * len(parts), (d, timed, jobs)
    assert "in shared jobs: " in "\n".join(detailed.lines())


def test_a_small_run_commits_to_each_trace_once(spark: SparkSession, tmp_path: Path) -> None:
    """A trace's log is read again only when another writer committed to it, and
    an append also moves the holds the last run left behind: one Delta commit per
    trace and run, where the runtime's holds were a commit of their own. A trace
    whose inputs did not change makes none: its empty append is deferred to the
    run's record of them, one commit for all, and carried into the trace's log by
    its next commit."""
    rt = build(spark, tmp_path / "warehouse", boroughs=True)
    load(spark, rt, 60)
    rt.run()
    change(spark, rt, 1)
    nodes = rt.stateful_nodes()

    def versions() -> dict[str, int]:
        return {str(x.trace_name): DeltaTable(rt.trace(x).where.uri).version() for x in nodes}

    zones_only = {
        str(x.trace_name)
        for x in nodes
        if not isinstance(x, n.Source) and {s.name for s in sources_of(x)} == {"zones"}
    }
    assert "views/boroughs" in zones_only  # and the DISTINCT below it
    warehouse = tmp_path / "warehouse"
    recorded = deferred_log.read(Location.of(warehouse)).version
    before = versions()
    rt.run()
    after = versions()
    assert {t: after[t] - before[t] for t in before} == {
        t: 0 if t in zones_only else 1 for t in before
    }
    assert deferred_log.read(Location.of(warehouse)).version == recorded + 1
    # the sources, appended by no run, are released at its end; the others hold
    # where this run read their history, until the next run's appends; the
    # deferred one where its last commit left them
    holds = {str(x.trace_name): rt.trace(x).state.hold_map[RUNTIME_READER].logical for x in nodes}
    sources = {str(x.trace_name) for x in nodes if isinstance(x, n.Source)}
    assert holds == {t: Antichain.from_epoch(1 if t in sources else 0) for t in holds}
    # read as of now, the deferred trace is at the run's upper, in this runtime
    # and in one opened afresh; its log is where the load left it
    fresh = build(spark, warehouse, boroughs=True)
    for runtime in (rt, fresh):
        uppers = {str(x.trace_name): runtime.trace(x).state.upper for x in nodes}
        assert uppers == dict.fromkeys(uppers, Antichain.from_epoch(2))
    deferred = [x for x in nodes if x.trace_name in zones_only]
    assert all(fresh.trace(x).snapshot.state.upper == Antichain.from_epoch(1) for x in deferred)
    # a new borough: their next appends carry the deferred batch into their logs,
    # and the record drops what no longer holds
    fresh.append_source("trips", spark.createDataFrame([], TRIPS), 2)
    fresh.append_source("zones", spark.createDataFrame([(9, "Bronx")], ZONES), 2)
    fresh.run()
    assert all(fresh.trace(x).snapshot.state.upper == Antichain.from_epoch(3) for x in deferred)
    assert not zones_only & set(deferred_log.read(Location.of(warehouse)).appends)


def test_traces_gathering_batches_cost_no_more_jobs(spark: SparkSession, tmp_path: Path) -> None:
    """Epoch after epoch, a small change still costs a job per slot per layer: a lookup
    whose key hashes are unknown (an accumulation reading its own sums) reads a
    small trace whole in the driver, however many batch files it has gathered,
    rather than launch a job to find which files hold the keys."""
    rt = build(spark, tmp_path / "warehouse")
    load(spark, rt, 60)
    rt.run()
    live = {i: trip(i) for i in range(60)}
    for epoch in range(1, 6):  # the fifth reads five batch files of each sum
        change(spark, rt, epoch)
        assert rt.run().profile.spark_jobs == 8, epoch  # type: ignore[union-attr]
        live[1000 + epoch] = trip(1000 + epoch)
        live[epoch] = trip(epoch, epoch)
        del live[50 + epoch]
    sums = [x for x in rt.stateful_nodes() if isinstance(x, n.Accumulate)]
    assert sums and all(len(rt.trace(x).files()) > PRUNING_MIN_FILES for x in sums)
    for view, rows in expected(live).items():
        assert _rounded(contents(rt, view)) == _rounded(rows), view


def test_a_small_interval_computes_each_reduction_once_and_sorts_no_history(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan shapes a small interval's cost rests on, as Spark executes them: a
    reduction's result is computed once for its output's insertions and
    retractions alike (Spark reuses no subplan without an exchange), and its
    joins hash the keys it touches, so no history it reads is sorted. A MIN/MAX
    level computes its extremes at most twice: for the keys a retraction reaches,
    from their history, and for the others, from their current rows."""
    rt = build(spark, tmp_path / "warehouse")
    load(spark, rt, 60)
    rt.run()
    plans: dict[str, str] = {}
    batch_plan = DeltaTrace.batch_plan

    def recorded(trace: DeltaTrace, updates: DataFrame, distinct: bool = False) -> PlannedBatch:
        plan = batch_plan(trace, updates, distinct)
        plans[trace.name] = plan.frame()._jdf.queryExecution().executedPlan().toString()
        return plan

    monkeypatch.setattr(DeltaTrace, "batch_plan", recorded)
    # as Spark plans a MIN/MAX level where the driver does not make its batch
    monkeypatch.setattr(driver_extremes, "reducible", lambda *_: False)
    change(spark, rt, 1)
    assert rt.run().profile.sizing == "small"  # type: ignore[union-attr]
    extremes = [x for x in rt.stateful_nodes() if isinstance(x, n.Reduce) and x.kind == "min_max"]
    assert len(extremes) == 2  # a MIN/MAX hierarchy of two levels
    for level in extremes:
        assert 1 <= plans[level.trace_name].count("functions=[min(") <= 2, level.trace_name
    reductions = [plans[x.trace_name] for x in rt.stateful_nodes() if isinstance(x, n.Reduce)]
    reductions = [p for p in reductions if "Join" in p]
    assert len(reductions) >= 3  # the MIN/MAX levels and the collapse
    assert all("ShuffledHashJoin" in p and "SortMergeJoin" not in p for p in reductions)


def test_large_and_small_sizings_compute_the_same_views(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sizing changes how Spark runs a plan, never what it computes: the same
    epochs run as large intervals (adaptive execution, counted parallel writes),
    as medium ones (small beside their state: no adaptive execution, lookups
    broadcasting their keys), as small ones, and as a large load whose layers
    reading few records (the aggregates over its 60 trips' three zones) run
    small, give the same views. No batch the trace logs leave unbounded counts as
    small by Spark's estimate here: a medium run writes each in slices of its key
    hashes in its layer's job, a large one counts it and writes it alone."""
    monkeypatch.setattr(interval, "SMALL_BATCH_BYTES", -1)
    live = {i: trip(i) for i in range(60)}
    runtimes = {}
    cases = {"small": (10**9, 0.25), "large": (-1, 0.0), "medium": (-1, 0.25), "mixed": (20, 0.25)}
    for name, (limit, share) in cases.items():
        rt = build(spark, tmp_path / name, Thresholds(small_records=limit, medium_share=share))
        load(spark, rt, 60)
        loaded = rt.run().profile
        assert loaded is not None and loaded.sizing == ("small" if name == "small" else "large")
        # a load's layers reading few records run small, unless nothing ever does
        assert ("small" in loaded.layers) == (name not in ("large", "medium")), loaded.layers
        # Spark's scans of the source, counted as bytes read, and the load's files
        assert loaded.bytes_read > 0 and loaded.bytes_written > 0
        assert loaded.bytes_written == sum(c.bytes_written for c in loaded.traces.values())
        for epoch in (1, 2):
            change(spark, rt, epoch)
        # both epochs: a few records, beside the load's
        again = {"large": "large", "medium": "medium"}.get(name, "small")
        assert rt.run().profile.sizing == again  # type: ignore[union-attr]
        runtimes[name] = rt
    for epoch in (1, 2):
        live[1000 + epoch] = trip(1000 + epoch)
        live[epoch] = trip(epoch, epoch)
        del live[50 + epoch]
    for view, rows in expected(live).items():
        for rt in runtimes.values():
            got = contents(rt, view)
            assert _rounded(got) == _rounded(rows), view


def test_a_join_on_an_aggregates_renamed_groups_reads_the_aggregates_trace(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A join keeps no arrangement of a side whose trace is keyed by its join
    columns: the zones by their source's key, the aggregate by its GROUP BY
    column, renamed. It looks keys up in those traces (under the column's name
    there), read by the driver by key hash in small intervals, by Spark joining
    the keys in large ones, and the views agree."""
    monkeypatch.setattr(interval, "SMALL_BATCH_BYTES", -1)
    live = {i: trip(i) for i in range(60)}
    runtimes = []
    for name, limit in (("small", 10**9), ("large", -1)):
        flow = Dataflow(spark, tmp_path / name)
        trips = flow.source("trips", TRIPS, key=["id"])
        zones = flow.source("zones", ZONES, key=["zone"])
        counted = trips.aggregate(["zone"], trips=agg.count()).select(z="zone", trips="trips")
        joined = zones.join(counted, left_on=["zone"], right_on=["z"])
        flow.view("zone_trips", joined.select("borough", "z", "trips"))
        rt = Runtime(flow, thresholds=Thresholds(small_records=limit, medium_share=0.0))
        arranged = [x.key for x in rt.stateful_nodes() if isinstance(x, n.Arrange)]
        assert arranged == [], arranged
        load(spark, rt, 60)
        rt.run()
        for epoch in (1, 2):
            change(spark, rt, epoch)
            assert rt.run().profile.sizing == name  # type: ignore[union-attr]
        runtimes.append(rt)
    for epoch in (1, 2):
        live[1000 + epoch] = trip(1000 + epoch)
        live[epoch] = trip(epoch, epoch)
        del live[50 + epoch]
    per_zone = Counter(zone for _, zone, _ in live.values())
    want = Counter((BOROUGHS[z % 3], z, count) for z, count in per_zone.items())
    assert all(contents(rt, "zone_trips") == want for rt in runtimes)


def _rounded(bag: Counter[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(
        {tuple(round(v, 6) if isinstance(v, float) else v for v in k): n for k, n in bag.items()}
    )
