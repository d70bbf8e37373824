"""The changes of every node in one run's interval ``[lower, upper)``.

A node that keeps a trace is planned (``Interval.plan``) into the batch its
trace appends, computed by its kind's rule (``runtime/rules``), and read back
from the committed batches once its layer is written; a node without one is
computed by its rule from its inputs' changes when a reader first asks. The
interval offers the rules what they read (``IntervalScope``): its nodes'
changes, their histories before ``lower`` for the keys those changes touch,
a loop run over its epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeGuard

from pyspark.sql import DataFrame

from dd_etl import sql_text
from dd_etl.errors import InvariantViolation, PlanError
from dd_etl.lattice import Antichain
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import (
    batch_bound,
    dependants,
    distinct_updates,
    memory_operators,
    passed_through,
    traces_read,
)
from dd_etl.runtime.catalog import RunTarget
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.full_refresh import full_changes
from dd_etl.runtime.iteration import LoopRun, Round
from dd_etl.runtime.rules import linear_rule, rule_for
from dd_etl.runtime.sizing import Sizing
from dd_etl.spark_driver import driver_for
from dd_etl.spark_memory import SparkMemory
from dd_etl.sql_text import quote
from dd_etl.trace.batch_writer import TraceAppend
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.deferred import DeferredAppend
from dd_etl.trace.delta_trace import SMALL_BATCH_BYTES, CollectedBatch, DeltaTrace
from dd_etl.trace.spark_files import ONE_TASK_RECORDS


def trace_label(node: n.Node) -> str:
    """What a node's work is profiled as: its trace, or its id."""
    return node.trace_name or node.id


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
    deferred: dict[str, DeferredAppend] = field(default_factory=dict)  # empty appends, by trace
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
        memory: SparkMemory,
        recomputed: Collection[str] = (),
        done: _Done | None = None,
    ) -> None:
        self.traces = runtime
        self.lower = lower
        self.upper = upper
        self.sizing = sizing
        self.memory = memory
        """What Spark's tasks share: how many batches one job computes."""
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
        return Interval(
            self.traces, self.lower, self.upper, sizing, self.memory, self.recomputed, self.done
        )

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
        few = self.traces.thresholds.for_records(sum(self._records_in(x) for x in read.values()))
        return few if few.driver_rows else self.sizing

    def _batch_bound(self, node: n.Node) -> int | None:
        """What the trace logs bound ``node``'s batch by (``batch_bound``), so that
        writing it needs no count: a batch of a million updates at most is
        computed into the driver by one job. A recomputed view reads its sources
        whole."""
        if self._recomputed(node):
            return None
        fresh = self.traces.trace(node).state.records == 0
        bound = batch_bound(node, self._records_in, fresh)
        return bound or None  # 0 would skip the write: inputs without changes never get here

    def _records_in(self, node: n.Node) -> int:
        """The records ``node``'s trace holds from ``lower`` on, as its log counts
        them (a merged batch straddling ``lower`` whole): its changes in the
        interval, or more."""
        return self.traces.trace(node).state.records_from(Antichain.from_epoch(self.lower))

    def _recomputed(self, node: n.Node) -> TypeGuard[n.View]:
        return isinstance(node, n.View) and node.name in self.recomputed

    def defer(self, node: n.Node) -> bool:
        """Defer the empty append of a trace node whose inputs have no changes in
        the interval (``trace/deferred.py``), for the run to record with the
        others (``done.deferred``); whether it is deferred. Nothing in, nothing
        out, and no commit: the trace reads the deferral as appended."""
        name = node.trace_name
        if name is None or name in self.done.deferred:
            return name is not None
        trace = self.traces.trace(node)
        if epoch_of(trace.state.upper) >= self.upper or not self._unchanged_inputs(node):
            return False
        self.done.deferred[name] = trace.deferred_to(Antichain.from_epoch(self.upper))
        return True

    def plan(self, node: n.Node) -> Append | None:
        """The batch ``node``'s trace appends for the interval, planned; None when
        there is none to append (a source, or a trace that already holds it), or
        when its empty append is deferred (``defer``).

        Its commit also moves the runtime's holds to ``lower - 1``, where the last
        run left history readable: what its own end would have released with a
        commit of its own. This run reads the trace as of ``lower - 1`` from there on."""
        if node.trace_name is None or self.defer(node):
            return None
        trace = self.traces.trace(node)
        start = epoch_of(trace.state.upper)  # fresh: pending() reloaded every trace
        if start >= self.upper:
            return None
        append = partial(
            TraceAppend,
            trace,
            lower=Antichain.from_epoch(start),
            upper=Antichain.from_epoch(self.upper),
            placement=self.sizing.placement,
            holds=self.traces.released(node, self.lower - 1) if self.lower > 0 else None,
            label=trace_label(node),
            operators=memory_operators(node),
        )
        if not self._recomputed(node):
            rows = rule_for(node).batch_in_driver(node, self)
            if rows is not None:
                return Append(node, append(CollectedBatch(rows), at_most=rows.num_rows))
        changes = self._changes(node, start)
        if changes is None:
            return None  # a source's: appended by whoever feeds it
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
        trace = self.traces.trace(node)
        if epoch_of(trace.state.upper) < self.upper:
            raise InvariantViolation(
                "a run reads a trace only once it holds the run's interval",
                f"trace {trace.name} is at {trace.state.upper}, the run reads up to {self.upper}",
            )
        # only files that can hold the interval's times: the batches this run appended
        return trace.updates(
            at=(self.upper - 1,),
            since=(self.lower,),
            placement=self.sizing.placement,
            columns=[*node.columns, TIME, DIFF],
        )

    def _changes(self, node: n.Node, start: int) -> DataFrame | None:
        """The changes a trace node appends from epoch ``start`` (its trace's upper)
        to the interval's upper: a recomputed view's by recomputing it, any other
        by its kind's rule."""
        if self._recomputed(node):
            return full_changes(self.traces, node, start, self.upper, self.sizing.placement)
        return rule_for(node).changes(node, self, start)

    def _unchanged_inputs(self, node: n.Node) -> bool:
        """Whether ``node``'s output surely has no changes in the interval because its
        inputs have none, as its kind's rule says (a recomputed view is always
        computed)."""
        return not self._recomputed(node) and rule_for(node).unchanged(node, self)

    def unchanged(self, node: n.Node) -> bool:
        """Whether ``node`` surely has no changes in ``[lower, upper)``, as the trace
        logs tell (no Spark job): a trace with no records in the interval's batches,
        or an operator whose inputs all have none."""
        if node.id not in self.done.unchanged:
            if node.trace_name in self.done.deferred:
                self.done.unchanged[node.id] = True  # its empty append was deferred
            elif node.trace_name is not None:
                self.delta(node)  # its layer appended it: read it as a user would
                held = self.traces.trace(node).state.records_from(Antichain.from_epoch(self.lower))
                self.done.unchanged[node.id] = held == 0
            else:
                self.done.unchanged[node.id] = rule_for(node).unchanged(node, self)
        return self.done.unchanged[node.id]

    def history(
        self,
        node: n.Node,
        before: int | None = None,
        probes: Sequence[n.Node] = (),
        accumulated: bool = True,
        hashes: Sequence[int] | None = None,
    ) -> Callable[[DataFrame], DataFrame]:
        """The node's trace accumulated before epoch ``before`` (default: the run's
        lower), for keys that (when ``probes`` are given) are among those the
        ``probes``' changes in the interval touch, in the same key columns, in
        order; not ``accumulated``: the updates before it, not consolidated
        (``DeltaTrace.updates_until``), for a consumer that sums per key itself.
        Either may hold rows of other keys (sharing a key hash with them, or all
        of a small trace's): every consumer joins the history on its keys, and
        the driver's reads then need no join of their own. A node without a trace
        is a linear function of traces keyed alike (``keyed_leaves``): its
        history is that function of theirs. ``hashes``, the sorted key hashes to
        read when the caller knows them better than ``probes`` would."""
        at = (self.lower if before is None else before) - 1

        def read(keys: DataFrame) -> DataFrame:
            if at < 0:
                return self.traces.flow.empty_updates(node.schema).drop(TIME)
            if node.trace_name is None:
                rule = linear_rule(node)
                if rule is None:
                    raise PlanError(f"{type(node).__name__} keeps no trace to read history from")
                inner = _keys_into(node, keys)
                return rule.apply(
                    node, lambda i: self.history(i, before, probes, accumulated)(inner)
                )
            trace = self.traces.trace(node)
            known = self._touched_hashes(probes, trace) if hashes is None else hashes
            if accumulated:
                return trace.read_at((at,), keys, known, self.sizing.placement, exact=False)
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
            source = self.traces.trace(probe)
            if source.key_types != target.key_types:
                return None  # equal keys of other types hash differently
            if probe.id not in self.done.touched:
                self.delta(probe)  # appended first
                self.done.touched[probe.id] = source.key_hashes_since((self.lower,))
            touched.update(self.done.touched[probe.id])
        return sorted(touched)

    def delta_from(self, node: n.Node, start: int) -> DataFrame:
        """``node``'s changes at epochs ``start`` and later: all of them unless a crashed
        run left a trace ahead of the others (a filter would put the epoch in the plan)."""
        changes = self.delta(node)
        return changes if start <= self.lower else changes.where(f"{quote(TIME)} >= {start}")

    def _compute(self, node: n.Node) -> DataFrame:
        """A trace node's changes read back from its committed batches; another's
        computed by its kind's rule from its inputs' changes."""
        if node.trace_name is not None:
            return self._from_trace(node)
        changes = rule_for(node).changes(node, self, self.lower)
        if changes is None:
            raise PlanError(f"{type(node).__name__} {node.id} has no changes of its own to compute")
        return changes

    def run_loop(self, loop: n.Iterate, start: int) -> DataFrame:
        """A top-level loop run over the epochs ``[start, upper)`` (``LoopRun``):
        its output's changes, its inner traces appended, its rounds reported."""
        views = [v.name for v in dependants(list(self.traces.flow.views.values()), {loop.id})]
        run = LoopRun(self.traces, loop, self.delta, views, self.sizing.placement, self.memory)
        try:
            return run.run(start, self.upper)
        finally:
            self.done.rounds.extend(run.rounds)


def _keys_into(node: n.Node, keys: DataFrame) -> DataFrame:
    """``keys`` named as ``node``'s input names them: a select may pass a key column
    on renamed (``keyed_leaves``)."""
    if not isinstance(node, n.Select):
        return keys
    passed = passed_through(node)
    if all(out == read for out, read in passed.items()):
        return keys
    return sql_text.select(keys, [f"{quote(c)} AS {quote(passed.get(c, c))}" for c in keys.columns])
