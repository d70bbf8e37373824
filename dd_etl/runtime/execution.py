"""One run of a dataflow, from top to bottom.

``execute`` is what ``Runtime.run`` does:

1. refuse views whose definition changed; choose how each view that is behind
   is refreshed (incrementally, or recomputed in full);
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
5. move the runtime's holds on the traces no append of this run committed to
   ``upper - 1`` (the sources, mostly): an append moved the others' holds to
   ``lower - 1`` in its own commit, and the next run's append moves them on.

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
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from dd_etl import sql_text
from dd_etl.arrow_schema import arrow_schema
from dd_etl.errors import InvariantViolation
from dd_etl.lattice import Antichain
from dd_etl.local_relations import local_relation
from dd_etl.operators import extremes, running
from dd_etl.operators.accumulate import delta_accumulate
from dd_etl.operators.delta_query import delta_query
from dd_etl.operators.extremes import order_struct
from dd_etl.operators.join import delta_join
from dd_etl.operators.reduce import delta_reduce, sides
from dd_etl.operators.running import delta_running, running_calls
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import PlanError
from dd_etl.plan.graph import (
    batch_bound,
    dependants,
    distinct_updates,
    keyed_by,
    keyed_leaves,
    layers,
    traces_read,
    upstream,
)
from dd_etl.plan.refresh import RefreshChoice
from dd_etl.profiling import Profiler, RunProfile
from dd_etl.runtime.catalog import RunTarget
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.full_refresh import full_changes
from dd_etl.runtime.iteration import LoopRun, Round
from dd_etl.runtime.linear_rules import apply_linear
from dd_etl.runtime.reducers import reducer_for
from dd_etl.runtime.sizing import Sizing, applied, for_records
from dd_etl.spark import full_compiler_for
from dd_etl.spark_driver import driver_for
from dd_etl.sql_text import quote
from dd_etl.trace.batch_writer import TraceAppend, write_together
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.delta_trace import SMALL_BATCH_BYTES, DeltaTrace
from dd_etl.trace.spark_files import ONE_TASK_RECORDS

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
    caller's profile when one is active (a pipeline tick, which adds its sinks)."""
    profiler = Profiler.current() or Profiler(rt.flow.spark)
    with profiler.active():
        report = _execute(rt, profiler, on_trace, views, refresh)
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
    rt.check_plans()
    chosen = list(rt.flow.views) if views is None else [rt.view(v).name for v in views]
    refresh = dict(rt.choose_refresh(chosen) if refresh is None else refresh)
    full = {v for v, c in refresh.items() if c.mode == "full"}
    # Up-to-date views need none of their state: leave alone what a recompute dropped.
    unmaintained = full | {v for v in chosen if v not in refresh and not rt.behind(v)}
    # 2. the pending interval
    lower, upper = rt.pending(chosen, unmaintained)
    report = RunReport(lower, upper, refresh=refresh)
    if lower >= upper:
        return report
    # 3. its size, from the trace logs; a large one may need a JVM compiling fully
    records = records_read(rt, chosen, unmaintained, full, lower)
    full_compiler_for(records)
    rt.discard_unmaintained(full)
    state = sum(rt.trace(x).state.records for x in rt.stateful_nodes(chosen, unmaintained))
    sizing = for_records(records, state, driver_for(rt.flow.spark).default_parallelism())
    profiler.sizing = sizing.name
    interval = Interval(rt, lower, upper, sizing, full)
    with applied(rt.flow.spark, sizing), ThreadPoolExecutor(max_workers=PARALLEL_TRACES) as pool:
        # 4. layer by layer. Traces of one depth depend only on shallower ones: plan
        # them side by side, and write their batches together (``batch_writer``).
        def release(node: n.Node) -> None:
            with profiler.trace(_label(node)):
                rt.release(node, upper)

        for depth, layer in enumerate(layers(rt.stateful_nodes(chosen, unmaintained))):
            layer_sizing = interval.layer_sizing(layer)
            profiler.layers.append(layer_sizing.name)
            same = layer_sizing is sizing
            with nullcontext() if same else applied(rt.flow.spark, layer_sizing):
                _bring_layer(interval.sized(layer_sizing), layer, depth, pool, profiler, on_trace)
        # 5. holds released where no append of this run moved them: history before
        # upper - 1 may be compacted
        unreleased = [
            x
            for x in rt.stateful_nodes(chosen, unmaintained)
            if x.id not in interval.done.released or isinstance(x, n.Iterate)
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
    (``batch_writer``), then each trace read back."""

    def plan(node: n.Node) -> Append | None:
        with profiler.trace(_label(node)):
            return interval.plan(node)

    def bring(node: n.Node) -> None:
        with profiler.trace(_label(node)):
            interval.delta(node)
        if on_trace is not None:
            on_trace(node)

    appends = [a for a in pool.map(plan, layer) if a is not None]
    placement = interval.sizing.placement
    appended = write_together(
        [a.write for a in appends],
        placement,
        pool,
        job_label=f"{LAYER_LABEL}/{depth}",
        after_job="layer.collected" if placement.driver else "layer.written",
    )
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


def _label(node: n.Node) -> str:
    return node.trace_name or node.id


LAYER_LABEL = "layers"
"""Profile label of the Spark job computing a layer's batches (``layers/<depth>``)."""


@dataclass(frozen=True)
class Append:
    """A node's batch for the interval, planned and not yet written."""

    node: n.Node
    write: TraceAppend


@dataclass
class _Done:
    """What an interval's computation has found and done so far, shared by the
    interval's layers."""

    deltas: dict[str, DataFrame] = field(default_factory=dict)
    touched: dict[str, list[int]] = field(default_factory=dict)
    unchanged: dict[str, bool] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)  # records appended per node
    released: set[str] = field(default_factory=set)  # nodes whose append moved the holds
    rounds: list[Round] = field(default_factory=list)


class Interval:
    """The changes of every node for one run's interval ``[lower, upper)``, computed
    as ``sizing`` says: the interval's own, or a layer's (``sized``)."""

    def __init__(
        self,
        runtime: RunTarget,
        lower: int,
        upper: int,
        sizing: Sizing,
        recomputed: Collection[str] = (),
        done: _Done | None = None,
    ) -> None:
        self.rt = runtime
        self.lower = lower
        self.upper = upper
        self.sizing = sizing
        self.recomputed = recomputed
        self.done = _Done() if done is None else done

    @property
    def driver_rows(self) -> bool:
        """The rows pass through the driver (``Placement.driver``): a small interval,
        or a layer of a larger one that reads few records."""
        return self.sizing.driver_rows

    def sized(self, sizing: Sizing) -> Interval:
        """This interval, its layer computed as ``sizing`` says, with what it found
        and did so far."""
        return Interval(self.rt, self.lower, self.upper, sizing, self.recomputed, self.done)

    def delta(self, node: n.Node) -> DataFrame:
        if node.id not in self.done.deltas:
            self.done.deltas[node.id] = self._compute(node)
        return self.done.deltas[node.id]

    def layer_sizing(self, layer: Sequence[n.Node]) -> Sizing:
        """How a layer of the interval runs: a larger interval's layer runs as a
        small one when its traces read few records, as the logs of the traces
        below count those they hold from ``lower`` on (a load's aggregates over
        the groups of millions of rows); sources read their own. A recomputed
        view reads its sources whole, and keeps the interval's sizing."""
        if self.driver_rows or any(self._recomputed(x) for x in layer):
            return self.sizing
        read = {
            x.id: x
            for node in layer
            for x in ([node] if isinstance(node, n.Source) else traces_read(node))
        }
        few = for_records(sum(self._records_in(x) for x in read.values()))
        return few if few.driver_rows else self.sizing

    def _batch_bound(self, node: n.Node) -> int | None:
        """What the trace logs bound ``node``'s batch by (``batch_bound``), so that
        writing it needs no count: a batch of a million updates at most is
        computed into the driver by one job. A recomputed view reads its sources
        whole."""
        if self._recomputed(node):
            return None
        fresh = self.rt.trace(node).state.records == 0
        bound = batch_bound(node, self._records_in, fresh)
        return bound or None  # 0 would skip the write: inputs without changes never get here

    def _records_in(self, node: n.Node) -> int:
        """The records ``node``'s trace holds from ``lower`` on, as its log counts
        them (a merged batch straddling ``lower`` whole): its changes in the
        interval, or more."""
        return self.rt.trace(node).state.records_from(Antichain.from_epoch(self.lower))

    def _recomputed(self, node: n.Node) -> bool:
        return isinstance(node, n.View) and node.name in self.recomputed

    def plan(self, node: n.Node) -> Append | None:
        """The batch ``node``'s trace appends for the interval, planned; None when
        there is none to append (a source, or a trace that already holds it).

        Its commit also moves the runtime's holds to ``lower - 1``, where the last
        run left history readable: what its own end would have released with a
        commit of its own. This run reads the trace as of ``lower - 1`` from there on."""
        if node.trace_name is None:
            return None
        trace = self.rt.trace(node)
        start = epoch_of(trace.state.upper)  # fresh: pending() reloaded every trace
        compute = self._changes(node, start)
        if compute is None or start >= self.upper:
            return None
        append = partial(
            TraceAppend,
            trace,
            lower=Antichain.from_epoch(start),
            upper=Antichain.from_epoch(self.upper),
            placement=self.sizing.placement,
            holds=self.rt.released(node, self.lower - 1) if self.lower > 0 else None,
            label=_label(node),
        )
        if self._unchanged_inputs(node):
            # nothing in, nothing out: an empty batch, committed without a Spark job
            return Append(node, append(self.rt.flow.empty_updates(node.schema), at_most=0))
        changes = compute()
        if start > self.lower:  # ahead of the run: an earlier one crashed after it
            changes = changes.where(f"{quote(TIME)} >= {start}")
        bound = self._batch_bound(node)
        return Append(
            node,
            append(
                changes,
                at_most=bound,
                distinct=not self._recomputed(node) and distinct_updates(node),
                slices_log2=None if self.driver_rows else self._slices_log2(changes, bound),
            ),
        )

    def _slices_log2(self, changes: DataFrame, bound: int | None) -> int | None:
        """How a batch of ``changes`` (of at most ``bound`` records, if known) is
        written with its layer's others, in one Spark job on the executors: in
        ``2 ** n`` slices of its key hashes, each by a task. One slice when the
        trace logs bound it by ``ONE_TASK_RECORDS``, or Spark estimates its plan
        small; else as many as the sizing's ``write_tasks`` and the bound call for.
        None: it is written alone, by as many tasks as a count of it calls for."""
        if bound is None:
            small = driver_for(changes.sparkSession).estimated_bytes(changes) <= SMALL_BATCH_BYTES
        else:
            small = bound <= ONE_TASK_RECORDS
        if small:
            return 0
        tasks = self.sizing.write_tasks
        if tasks is None:
            return None
        if bound is not None:
            tasks = max(tasks, -(-bound // ONE_TASK_RECORDS))
        return (tasks - 1).bit_length()

    def appended(self, planned: Append, appended: bool) -> None:
        """Record what ``planned``'s commit did: the holds it moved, the records of
        the batch it appended."""
        if not appended:
            return
        write = planned.write
        if write.holds is not None:
            self.done.released.add(planned.node.id)
        # the new batch, unless back-pressure already merged it away
        self.done.written[planned.node.id] = sum(
            b.records
            for b in write.trace.state.batches
            if b.description.lower == write.lower and b.description.upper == write.upper
        )

    def _from_trace(self, node: n.Node) -> DataFrame:
        """The node's changes in the interval, read back from the batches its layer
        appended: a run appends where it commits a layer, never inside a read."""
        trace = self.rt.trace(node)
        if epoch_of(trace.state.upper) < self.upper:
            raise InvariantViolation(
                "a run reads a trace only once it holds the run's interval",
                f"trace {trace.name} is at {trace.state.upper}, the run reads up to {self.upper}",
            )
        # only files that can hold the interval's times: the batches this run appended
        df = trace.updates(
            at=(self.upper - 1,), since=(self.lower,), placement=self.sizing.placement
        )
        return sql_text.columns(df, [*node.columns, TIME, DIFF])

    def _unchanged_inputs(self, node: n.Node) -> bool:
        """Whether ``node``'s output surely has no changes in the interval because its
        inputs have none: true of arrangements, reductions, accumulations and
        incrementally kept views (a loop or a recomputed view is always computed)."""
        if self._recomputed(node):
            return False
        kinds = n.Arrange | n.View | n.Reduce | n.Accumulate
        return isinstance(node, kinds) and all(self.unchanged(i) for i in node.inputs)

    def unchanged(self, node: n.Node) -> bool:
        """Whether ``node`` surely has no changes in ``[lower, upper)``, as the trace
        logs tell (no Spark job): a trace with no records in the interval's batches,
        or an operator whose inputs all have none."""
        if node.id not in self.done.unchanged:
            if node.trace_name is not None:
                self.delta(node)  # its layer appended it: read it as a user would
                held = self.rt.trace(node).state.records_from(Antichain.from_epoch(self.lower))
                self.done.unchanged[node.id] = held == 0
            elif isinstance(node, n.Constant):
                self.done.unchanged[node.id] = self.lower > 0
            else:
                self.done.unchanged[node.id] = all(self.unchanged(i) for i in node.inputs)
        return self.done.unchanged[node.id]

    def history(
        self,
        node: n.Node,
        before: int | None = None,
        probes: Sequence[n.Node] = (),
        exact: bool = True,
        hashes: Sequence[int] | None = None,
    ) -> Callable[[DataFrame], DataFrame]:
        """The node's trace accumulated before epoch ``before`` (default: the run's
        lower), for keys that (when ``probes`` are given) are among those the
        ``probes``' changes in the interval touch, in the same key columns, in
        order. Not ``exact``: the updates before it, not consolidated, and maybe
        with those of other keys (``DeltaTrace.updates_until``), for a consumer
        that joins on the key and sums per key itself. A node without a trace is a
        linear function of traces keyed alike (``keyed_leaves``): its history is
        that function of theirs. ``hashes``, the sorted key hashes to read when the
        caller knows them better than ``probes`` would."""
        at = (self.lower if before is None else before) - 1

        def read(keys: DataFrame) -> DataFrame:
            if at < 0:
                return self.rt.flow.empty_updates(node.schema).drop(TIME)
            if node.trace_name is None:
                done = apply_linear(node, lambda i: self.history(i, before, probes, exact)(keys))
                if done is None:
                    raise PlanError(f"{type(node).__name__} keeps no trace to read history from")
                return done
            trace = self.rt.trace(node)
            known = self._touched_hashes(probes, trace) if hashes is None else hashes
            if exact:
                return trace.read_at((at,), keys, known, self.sizing.placement)
            return trace.updates_until((at,), keys, known, self.sizing.placement)

        return read

    def _touched_hashes(self, probes: Sequence[n.Node], target: DeltaTrace) -> list[int] | None:
        """The key hashes the ``probes``' changes in the interval touch, as ``target``
        hashes keys (None if unknown): read from the batches the probes appended, so
        a lookup reads only those keys' rows and costs no job to find them."""
        if not self.driver_rows or not probes:
            return None
        touched: set[int] = set()
        for probe in probes:
            source = self.rt.trace(probe)
            if source.key_types != target.key_types:
                return None  # equal keys of other types hash differently
            if probe.id not in self.done.touched:
                self.delta(probe)  # appended first
                self.done.touched[probe.id] = source.key_hashes_since((self.lower,))
            touched.update(self.done.touched[probe.id])
        return sorted(touched)

    def _compute(self, node: n.Node) -> DataFrame:
        ins = node.inputs
        if node.trace_name is not None:
            return self._from_trace(node)
        if isinstance(node, n.Constant):
            if self.lower > 0:
                return self.rt.flow.empty_updates(node.schema)
            return self.rt.flow.constant_updates(node)
        done = apply_linear(node, self.delta)
        if done is not None:
            return done
        if isinstance(node, n.Join):
            left, right = ins
            probes = keyed_by(left, node.left_key) and keyed_by(right, node.right_key)
            return delta_join(
                self.delta(left),
                self.delta(right),
                self.history(left, probes=[right] if probes else []),
                self.history(right, probes=[left] if probes else []),
                node.left_key,
                node.right_key,
                left.columns,
                node.right_columns,
                node.null_safe,
            )
        if isinstance(node, n.DeltaQuery):
            arranged = dict(zip(node.lookups, ins, strict=True))
            relations = range(len(node.orders))
            first = [next(a for lk, a in arranged.items() if lk.relation == r) for r in relations]
            return delta_query(
                [self.delta(a) for a in first],
                lambda lk: self.history(arranged[lk]),
                node.orders,
                node.columns,
            )
        raise PlanError(f"no runtime rule for operator {type(node).__name__}")

    def _changes(self, node: n.Node, start: int) -> Callable[[], DataFrame] | None:
        """How the changes a trace node appends from epoch ``start`` (its trace's
        upper) to the interval's upper are computed; None for a source's, which
        are appended by whoever feeds it."""
        ins = node.inputs
        if isinstance(node, n.Source):
            return None
        if isinstance(node, n.View) and node.name in self.recomputed:
            return lambda: full_changes(self.rt, node, start, self.upper, self.sizing.placement)
        if isinstance(node, n.Arrange | n.View):
            return lambda: self.delta(ins[0])
        if isinstance(node, n.Accumulate):
            # Continue from the sums the trace holds, not from the run's lower: adding
            # earlier epochs again, in another order, can change a float sum's last
            # bits, and the retraction of the stored row would then not match it.
            return lambda: delta_accumulate(
                self._delta_from(ins[0], start),
                self.history(node, start),
                node.key,
                node.values,
                one_time=self.upper - start == 1,
            )
        if isinstance(node, n.Reduce):
            return lambda: self._reduce(node)
        if isinstance(node, n.Iterate):
            return lambda: self._iterate(node, start)
        raise PlanError(f"no runtime rule for operator {type(node).__name__}")

    def _delta_from(self, node: n.Node, start: int) -> DataFrame:
        """``node``'s changes at epochs ``start`` and later: all of them unless a crashed
        run left a trace ahead of the others (a filter would put the epoch in the plan)."""
        changes = self.delta(node)
        return changes if start <= self.lower else changes.where(f"{quote(TIME)} >= {start}")

    def _reduce(self, node: n.Reduce) -> DataFrame:
        probes = keyed_leaves(node.inputs[0], node.key) or []
        kept = self._kept_extremes(node, probes)
        if kept is not None:
            return kept

        def reduced(changes: DataFrame, hashes: list[int] | None = None) -> DataFrame:
            return delta_reduce(
                changes,
                self.history(node.inputs[0], probes=probes, exact=False, hashes=hashes),
                self.history(node, probes=probes, exact=False, hashes=hashes),
                node.key,
                node.columns,
                reducer_for(node),
                one_time=self.upper - self.lower == 1,
            )

        if node.kind == "running" and self.upper - self.lower == 1:
            return self._running(node, probes, reduced)
        return reduced(self.delta(node.inputs[0]))

    def _running(
        self,
        node: n.Reduce,
        probes: Sequence[n.Node],
        reduced: Callable[[DataFrame, list[int] | None], DataFrame],
    ) -> DataFrame:
        """The changes of a running window at one epoch (``operators/running.py``):
        the partitions whose rows arrived after their last one from their totals,
        the others by the window rule (``reduced``), reading the history of those
        alone where the driver tells which they are."""
        arranged, last, totals = node.inputs
        found = running_calls(node.calls, arranged.schema, node.key)
        ordered = None if found is None else order_struct(found.order, arranged.schema)
        if found is None or ordered is None:
            raise PlanError(f"reduction {node.id}: its calls are not running aggregates")
        changes = self.delta(arranged)  # appended first
        told = self._out_of_order_in_driver(node, found, ordered, probes)
        keys, hashes = told if told is not None else (None, None)
        return delta_running(
            changes,
            keys,
            self.history(last, probes=probes),
            self.history(totals, probes=probes),
            lambda rest: reduced(rest, hashes),
            node.key,
            found,
            ordered,
            node.schema,
        )

    def _out_of_order_in_driver(
        self,
        node: n.Reduce,
        found: running.Running,
        ordered: Sequence[extremes.OrderField],
        probes: Sequence[n.Node],
    ) -> tuple[DataFrame, list[int]] | None:
        """The keys whose changes are not all insertions after their last row, as a
        local relation, and their sorted hashes, told from the rows the driver
        reads; None where it cannot tell."""
        arranged, last, _ = node.inputs
        if not self.driver_rows or list(probes) != [arranged]:
            return None
        source, lasts = self.rt.trace(arranged), self.rt.trace(last)
        if source.key_types != lasts.key_types or not extremes.comparable(
            last.schema[found.side].dataType
        ):
            return None
        changed = source.stored_rows(since=(self.lower,))
        if changed is None:
            return None
        hashes = sorted(set(changed.column(KEY_HASH).to_pylist()))
        current = lasts.stored_rows(at=(self.lower - 1,), key_hashes=hashes)
        if current is None:
            return None
        hit = running.out_of_order(changed, current, node.key, found, ordered)
        return None if hit is None else self._keys_relation(node, hit)

    def _keys_relation(self, node: n.Reduce, hit: pa.Table) -> tuple[DataFrame, list[int]]:
        """Keys the driver found (key columns and key hash) as a local relation of
        ``node``'s key columns, and their sorted hashes."""
        key_schema = StructType([node.schema[k] for k in node.key])
        keys = hit.select(list(node.key)).cast(arrow_schema(key_schema))
        hashes = sorted(hit.column(KEY_HASH).to_pylist())
        return local_relation(self.rt.flow.spark, keys, key_schema), hashes

    def _kept_extremes(self, node: n.Reduce, probes: Sequence[n.Node]) -> DataFrame | None:
        """The changes of a MIN/MAX reduction with the history read only for the keys
        a retraction may move (``operators/extremes.py``): one epoch, keys (a
        global one is a key of its own, ``__all``), and the input a trace keyed as
        the reduction is. The driver tells which keys a retraction reaches where it
        holds the rows (values Arrow compares as Spark does, few enough rows);
        Spark does elsewhere."""
        arranged = node.inputs[0]
        if node.kind != "min_max" or not node.key or self.upper - self.lower != 1:
            return None
        if list(probes) != [arranged]:
            return None
        source, target = self.rt.trace(arranged), self.rt.trace(node)
        if source.key_types != target.key_types:
            return None
        changes = self.delta(arranged)  # appended first
        found = self._reached_in_driver(node, source, target) if self.driver_rows else None
        reached, hashes = found if found is not None else (None, None)
        return extremes.delta_extremes(
            changes,
            reached,
            self.history(arranged, probes=[arranged], exact=False, hashes=hashes),
            self.history(node, probes=[arranged], exact=False),
            node.key,
            node.columns,
        )

    def _reached_in_driver(
        self, node: n.Reduce, source: DeltaTrace, target: DeltaTrace
    ) -> tuple[DataFrame, list[int]] | None:
        """The keys whose extremes a retraction may move, as a local relation, and
        their sorted hashes, told from the rows the driver reads; None where it
        cannot tell."""
        if not all(extremes.comparable(node.schema[s].dataType) for s, _ in sides(node.columns)):
            return None
        found = source.stored_rows(since=(self.lower,))
        if found is None:
            return None
        retractions = found.filter(pc.less(found.column(DIFF), 0))
        hashes = sorted(set(retractions.column(KEY_HASH).to_pylist()))
        current = target.stored_rows(at=(self.lower - 1,), key_hashes=hashes)
        if current is None:
            return None
        return self._keys_relation(node, extremes.reached(retractions, current, node.key))

    def _iterate(self, loop: n.Iterate, start: int) -> DataFrame:
        views = [v.name for v in dependants(list(self.rt.flow.views.values()), {loop.id})]
        run = LoopRun(self.rt, loop, self.delta, views, self.sizing.placement)
        try:
            return run.run(start, self.upper)
        finally:
            self.done.rounds.extend(run.rounds)
