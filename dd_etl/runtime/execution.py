"""One run of a dataflow, from top to bottom.

``execute`` is what ``Runtime.run`` does:

1. refuse views whose definition changed; discard the traces computed from a
   source's history that was started over since; choose how each view that is
   behind is refreshed (incrementally, or recomputed in full);
2. find the pending interval ``[lower, upper)``: ``upper`` the meet of the
   sources' uppers, ``lower`` the least upper of the traces to maintain;
3. size the interval from the trace logs (no Spark job), and with it choose where
   its work runs (``runtime/sizing.py``): a small one looks up history in the
   driver, a medium one (small beside its state) broadcasts its keys to lookups
   on the executors, a large one joins whole inputs there; a layer of traces
   that read few records runs small (``Interval.layer_sizing``);
4. bring the traces up to date layer by layer, the traces of a layer side by
   side (``Interval``): each plans its batch for ``[its upper, upper)``; the
   batch writer (``trace/batch_writer.py``) computes the layer's batches in
   shared Spark jobs as the layer's placement says, into the driver or written
   on the executors; each trace appends with its own compare-and-append, then
   reads the interval back from the committed files;
5. record the empty appends of the traces whose inputs did not change,
   deferred rather than committed one by one (``trace/deferred.py``), in one
   commit of the warehouse's log of them (``trace/deferred_log.py``); move the
   runtime's holds on the traces no append of this run committed to
   ``upper - 1`` (the sources, mostly): an append moved the others' holds to
   ``lower - 1`` in its own commit, and the next run's append moves them on. A
   trace whose append was deferred keeps its holds where they are: it took
   nothing in to compact.

Every node that keeps a trace appends its changes before anything downstream
reads them, so downstream operators consume committed data and nothing is
computed twice. A crash anywhere leaves each trace either before or after its
append; the next run starts from the least upper and recomputes only what is
missing (the changes are a deterministic function of the inputs before
``upper``, invariant 5 of ARCHITECTURE.md), and appends that were already committed are
no-ops. That holds inside a layer too: a crash after its Spark job, or after
some of its traces committed, leaves the others to the next run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field

from dd_etl.lattice import Antichain
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import dependants, layers, upstream
from dd_etl.plan.refresh import RefreshChoice
from dd_etl.profiling import Profiler, RunProfile, layer_label
from dd_etl.runtime.catalog import RunTarget
from dd_etl.runtime.interval import Append, Interval, trace_label
from dd_etl.runtime.iteration import Round
from dd_etl.runtime.sizing import applied
from dd_etl.spark import full_compiler_for
from dd_etl.spark_driver import driver_for
from dd_etl.spark_memory import SparkOutOfMemory
from dd_etl.trace.batch_writer import write_together

PARALLEL_TRACES = 4
"""Traces written concurrently within one layer of the dataflow."""


@dataclass
class RunReport:
    """What a run computed: its interval, per view the change records it wrote,
    per loop iteration the updates processed, how views were refreshed, its cost."""

    lower: int
    upper: int
    views: dict[str, int] = field(default_factory=dict)  # change records this run wrote per view
    rounds: list[Round] = field(default_factory=list)  # what each loop iteration processed
    refresh: dict[str, RefreshChoice] = field(default_factory=dict)  # views with pending epochs
    started_over: list[str] = field(default_factory=list)  # views a source's new history restarted
    profile: RunProfile | None = None  # jobs, stages and seconds, per trace and phase

    @property
    def epochs(self) -> int:
        return max(0, self.upper - self.lower)


def execute(
    rt: RunTarget,
    on_trace: Callable[[n.Node], None] | None = None,
    views: Sequence[str] | None = None,
    refresh: Mapping[str, RefreshChoice] | None = None,
) -> RunReport:
    """Bring ``views`` (default: all) of ``rt`` up to date, profiled as part of the
    caller's profile when one is active (a pipeline tick, which adds its sinks, and
    takes the profile itself), else on its own (``RunReport.profile``)."""
    caller = Profiler.current()
    profiler = caller or Profiler(rt.flow.spark)
    with profiler.active():
        report = _execute(rt, profiler, on_trace, views, refresh)
    if caller is None:
        report.profile = profiler.result()
    return report


def _execute(
    rt: RunTarget,
    profiler: Profiler,
    on_trace: Callable[[n.Node], None] | None,
    views: Sequence[str] | None,
    refresh: Mapping[str, RefreshChoice] | None,
) -> RunReport:
    # 1. what to compute, and how
    chosen = list(rt.flow.views) if views is None else [rt.view(v).name for v in views]
    rt.check_plans(chosen)
    started_over = rt.discard_stale(rt.stateful_nodes(chosen))
    refresh = dict(rt.choose_refresh(chosen) if refresh is None else refresh)
    full = {v for v, c in refresh.items() if c.mode == "full"}
    # Up-to-date views need none of their state: leave alone what a recompute dropped.
    unmaintained = full | {v for v in chosen if v not in refresh and not rt.behind(v)}
    # 2. the pending interval
    lower, upper = rt.pending(chosen, unmaintained)
    report = RunReport(lower, upper, refresh=refresh)
    report.started_over = [x.name for x in started_over if isinstance(x, n.View)]
    if lower >= upper:
        return report
    # 3. its size, from the trace logs; a large one may need a JVM compiling fully
    records = records_read(rt, chosen, unmaintained, full, lower)
    full_compiler_for(records)
    rt.discard_unmaintained(full)
    state = sum(rt.trace(x).state.records for x in rt.stateful_nodes(chosen, unmaintained))
    driver = driver_for(rt.flow.spark)
    sizing = rt.thresholds.for_records(records, state, driver.default_parallelism())
    profiler.sizing = sizing.name
    interval = Interval(rt, lower, upper, sizing, driver.memory(), full)
    with applied(rt.flow.spark, sizing), ThreadPoolExecutor(max_workers=PARALLEL_TRACES) as pool:
        # 4. layer by layer. Traces of one depth depend only on shallower ones: plan
        # them side by side, and write their batches together (``batch_writer``).
        def release(node: n.Node) -> None:
            with profiler.trace(trace_label(node)):
                rt.release(node, upper)

        for depth, layer in enumerate(layers(rt.stateful_nodes(chosen, unmaintained))):
            layer_sizing = interval.layer_sizing(layer)
            profiler.add_layer(layer_sizing.name, [trace_label(x) for x in layer])
            same = layer_sizing is sizing
            with nullcontext() if same else applied(rt.flow.spark, layer_sizing):
                _bring_layer(interval.sized(layer_sizing), layer, depth, pool, profiler, on_trace)
        # 5. the empty appends deferred, recorded in one commit; holds released where
        # no append of this run moved them: history before upper - 1 may be compacted
        deferred = interval.done.deferred
        rt.record_deferred(deferred)
        unreleased = [
            x
            for x in rt.stateful_nodes(chosen, unmaintained)
            if (x.id not in interval.done.released and x.trace_name not in deferred)
            or isinstance(x, n.Iterate)
        ]
        list(pool.map(release, unreleased))
    report.views = {v: interval.done.written.get(rt.flow.views[v].id, 0) for v in chosen}
    report.rounds = interval.done.rounds
    return report


def _bring_layer(
    interval: Interval,
    layer: Sequence[n.Node],
    depth: int,
    pool: ThreadPoolExecutor,
    profiler: Profiler,
    on_trace: Callable[[n.Node], None] | None,
) -> None:
    """Bring the traces of one layer up to date, side by side: their batches
    planned, written together as the layer's sizing places them
    (``batch_writer``), then each trace read back; a trace whose inputs did not
    change defers its empty append (``Interval.defer``), and is read when asked."""

    def plan(node: n.Node) -> Append | None:
        if interval.defer(node):
            return None  # no work of its own to profile: its inputs did not change
        with profiler.trace(trace_label(node)):
            return interval.plan(node)

    def bring(node: n.Node) -> None:
        if node.trace_name not in interval.done.deferred:  # read back when asked
            with profiler.trace(trace_label(node)):
                interval.delta(node)
        if on_trace is not None:
            on_trace(node)

    appends = [a for a in pool.map(plan, layer) if a is not None]
    placement = interval.sizing.placement
    try:
        appended = write_together(
            [a.write for a in appends],
            placement,
            interval.memory,
            pool,
            job_label=layer_label(depth),
            after_job="layer.collected" if placement.driver else "layer.written",
        )
    except SparkOutOfMemory as e:
        views = dependants(list(interval.traces.flow.views.values()), {x.id for x in layer})
        names = ", ".join(v.name for v in views[:10]) + (", …" if len(views) > 10 else "")
        what = f"layer {depth} of the run ({len(layer)} traces, which views {names} read)"
        raise SparkOutOfMemory(what, e.memory, e.cause) from e
    for planned, done in zip(appends, appended, strict=True):
        interval.appended(planned, done)
    list(pool.map(bring, layer))


def records_read(
    rt: RunTarget,
    views: Sequence[str],
    unmaintained: Collection[str],
    full: Collection[str],
    lower: int,
) -> int:
    """Source records a run from ``lower`` takes in, plus all records of the
    sources a recomputed view reads, as the trace logs count them (no Spark job)."""
    start = Antichain.from_epoch(lower)
    nodes = rt.stateful_nodes(views, unmaintained)
    records = sum(rt.trace(x).state.records_from(start) for x in nodes if isinstance(x, n.Source))
    for view in full:
        for source in (x for x in upstream([rt.view(view)]) if isinstance(x, n.Source)):
            records += rt.trace(source).state.records
    return records
