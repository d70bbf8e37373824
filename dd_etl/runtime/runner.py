"""Bring a dataflow's views up to date, epoch interval by epoch interval.

A run processes all pending epochs ``[lower, upper)`` at once, where ``upper``
is the meet of the sources' uppers and ``lower`` the least upper of the traces
the dataflow maintains: many epochs go through the same Spark jobs, their times
travelling in the data.

Every node that keeps a trace appends its changes for ``[its upper, upper)``
with the trace's compare-and-append, then reads its changes for ``[lower,
upper)`` back from the trace, so downstream operators consume committed data
and nothing is computed twice. A crash anywhere leaves each trace either before
or after its append; the next run starts from the least upper and recomputes
only what is missing (the changes are a deterministic function of the inputs
before ``upper``, DESIGN invariant 5), and appends that were already committed
are no-ops.

After a run, the runtime's hold on every trace moves to ``upper - 1``: the next
run reads history strictly before its ``lower``, which may then be compacted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.lattice import Antichain, meet_all
from dd_etl.operators import linear
from dd_etl.operators.accumulate import delta_accumulate
from dd_etl.operators.delta_query import delta_query
from dd_etl.operators.join import delta_join
from dd_etl.operators.reduce import delta_reduce
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import Dataflow, PlanError
from dd_etl.plan.iteration import inner_traces, loop_nest
from dd_etl.plan.refresh import RefreshChoice, choose
from dd_etl.profiling import Profiler, RunProfile
from dd_etl.runtime.full_refresh import full_changes, pending_records, private_state
from dd_etl.runtime.iteration import LoopRun, Round
from dd_etl.runtime.linear_rules import apply_linear
from dd_etl.runtime.reducers import reducer_for
from dd_etl.runtime.sizing import LARGE, Sizing, applied, for_records
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.delta_trace import DeltaTrace, discard_table
from dd_etl.trace.errors import SinceViolation

log = logging.getLogger(__name__)

RUNTIME_READER = "runtime"
PARALLEL_TRACES = 4
"""Traces written concurrently within one layer of the dataflow."""
RETENTION_READER = "retention"
PLAN_META = "plan"
"""Trace meta key of a view: the structural id of the definition that computes it."""


class PlanChanged(PlanError):
    """A view's trace was computed by a different definition than the current one."""

    def __init__(self, view: str, built: str, current: str) -> None:
        super().__init__(
            f"view {view!r} changed since its results were computed (plan {built} then, "
            f"{current} now); rebuild it to recompute it from scratch"
        )
        self.view = view


@dataclass
class RunReport:
    lower: int
    upper: int
    views: dict[str, int] = field(default_factory=dict)  # change records this run wrote per view
    rounds: list[Round] = field(default_factory=list)  # what each loop iteration processed
    refresh: dict[str, RefreshChoice] = field(default_factory=dict)  # views with pending epochs
    profile: RunProfile | None = None  # jobs, stages and seconds, per trace and phase

    @property
    def epochs(self) -> int:
        return max(0, self.upper - self.lower)


def epoch_of(frontier: Antichain) -> int:
    bound = frontier.epoch_bound()
    if bound is None:
        raise PlanError("a complete (empty) frontier has no next epoch")
    return bound


class Runtime:
    """Owns the traces of one dataflow under its warehouse root."""

    def __init__(self, flow: Dataflow, retain_epochs: int | None = None) -> None:
        self.flow = flow
        self.spark = flow.spark
        self.retain_epochs = retain_epochs
        self._traces: dict[str, DeltaTrace] = {}
        self._sizing = LARGE

    # ------------------------------------------------------------------ traces

    def trace(self, node: n.Node) -> DeltaTrace:
        name = node.trace_name
        assert name is not None
        if name not in self._traces:
            key = trace_key(node)
            uri = str(Path(self.flow.warehouse) / name)
            trace = DeltaTrace.create(self.spark, uri, name, node.schema, key)
            trace.register_reader(RUNTIME_READER, Antichain.from_epoch(0), Antichain.from_epoch(0))
            if isinstance(node, n.View):
                # Past epochs are read by filtering stored times (``read``, ``changes``):
                # retention holds times back, never batch boundaries, or the view's
                # spine could never merge and would grow by a batch per epoch.
                trace.register_reader(RETENTION_READER, Antichain.from_epoch(0), Antichain.empty())
                if not trace.state.hold_map[RETENTION_READER].physical.is_empty():  # older traces
                    trace.downgrade_reader(RETENTION_READER, physical=Antichain.empty())
                if PLAN_META not in trace.state.meta_map:
                    trace.annotate({PLAN_META: node.plan})
            trace.delta_storage.one_task_writes = self._sizing.one_task_writes
            self._traces[name] = trace
        return self._traces[name]

    def loop_trace(self, loop: n.Iterate, node: n.Node) -> DeltaTrace:
        """The product-time trace a node inside ``loop`` (or a loop nested in it)
        keeps its history in: times ``(epoch, i1, …)``, one iteration per loop
        around the node."""
        name = loop.inner_trace_name(node)
        if name not in self._traces:
            uri = str(Path(self.flow.warehouse) / name)
            key = trace_key(node)
            dims = 1 + loop_nest(loop)[node.id][1]
            trace = DeltaTrace.create(self.spark, uri, name, node.schema, key, dims=dims)
            bottom = Antichain.minimum(dims)
            trace.register_reader(RUNTIME_READER, bottom, bottom)
            trace.delta_storage.one_task_writes = self._sizing.one_task_writes
            self._traces[name] = trace
        return self._traces[name]

    def stateful_nodes(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> list[n.Node]:
        """Every node with a trace that ``views`` (default: all) depend on, inputs
        before users. Of a view in ``recomputed`` (default: those whose refresh
        policy is ``full``) only the sources and views it reads: its operator
        state is not maintained."""
        roots = self.flow.views.values() if views is None else [self._view(v) for v in views]
        if recomputed is None:
            policies = {v: self.flow.refresh_policy(v).policy for v in self.flow.views}
            recomputed = [v for v, policy in policies.items() if policy == "full"]
        nodes = upstream(list(roots), recomputed)
        return [x for x in nodes if x.trace_name is not None]

    # ------------------------------------------------------------------ input

    def append_source(
        self,
        name: str,
        changes: DataFrame,
        epoch: int,
        meta: dict[str, str] | None = None,
    ) -> bool:
        """Add a source's changes as epoch ``epoch`` (``_diff`` defaults to +1 per row).

        ``meta`` (e.g. which source versions or files the epoch covers) is committed
        atomically with the changes; read it back from ``trace(...).state.meta_map``.
        """
        source = self.flow.sources.get(name)
        if source is None:
            raise PlanError(f"unknown source {name!r}; sources are {sorted(self.flow.sources)}")
        if DIFF not in changes.columns:
            changes = changes.withColumn(DIFF, F.lit(1).cast("long"))
        updates = changes.withColumn(TIME, F.lit(epoch).cast("long"))
        return self.trace(source).compare_and_append(
            updates, Antichain.from_epoch(epoch), Antichain.from_epoch(epoch + 1), meta
        )

    # -------------------------------------------------------------------- run

    def pending(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> tuple[int, int]:
        """The epochs ``[lower, upper)`` a run of ``views`` has to compute."""
        nodes = self.stateful_nodes(views, recomputed)
        sources = [x for x in nodes if isinstance(x, n.Source)]
        upper = epoch_of(meet_all(self.trace(s).reload().upper for s in sources)) if sources else 0
        maintained = [x for x in nodes if not isinstance(x, n.Source)]
        lower = min((epoch_of(self.trace(x).reload().upper) for x in maintained), default=upper)
        return lower, upper

    def check_plans(self) -> None:
        """Refuse to continue a view whose definition changed: its trace holds results
        of the old one, and new changes on top would be neither."""
        for name, view in self.flow.views.items():
            built = self.trace(view).state.meta_map.get(PLAN_META)
            if built is not None and built != view.plan:
                raise PlanChanged(name, built, view.plan)

    def run(
        self,
        on_trace: Callable[[n.Node], None] | None = None,
        views: Sequence[str] | None = None,
        refresh: Mapping[str, RefreshChoice] | None = None,
    ) -> RunReport:
        """Bring ``views`` (default: all) up to date, as far as the sources they read
        allow; ``on_trace(node)`` hears of each trace done. ``refresh``: how each
        view is brought up to date (default: ``choose_refresh``).

        The run is profiled (``RunReport.profile``), as part of the caller's
        profile when one is active (a pipeline tick, which adds its sinks)."""
        profiler = Profiler.current() or Profiler(self.spark)
        with profiler.active():
            report = self._run(profiler, on_trace, views, refresh)
        report.profile = profiler.result()
        return report

    def _run(
        self,
        profiler: Profiler,
        on_trace: Callable[[n.Node], None] | None,
        views: Sequence[str] | None,
        refresh: Mapping[str, RefreshChoice] | None,
    ) -> RunReport:
        self.check_plans()
        chosen = list(self.flow.views) if views is None else [self._view(v).name for v in views]
        refresh = dict(self.choose_refresh(chosen) if refresh is None else refresh)
        full = {v for v, c in refresh.items() if c.mode == "full"}
        # Up-to-date views need none of their state: leave alone what a recompute dropped.
        unmaintained = full | {v for v in chosen if v not in refresh and not self._behind(v)}
        lower, upper = self.pending(chosen, unmaintained)
        report = RunReport(lower, upper, refresh=refresh)
        if lower >= upper:
            return report
        self._discard_unmaintained(full)
        sizing = for_records(self.records_read(chosen, unmaintained, full, lower))
        profiler.sizing = sizing.name
        interval = _Interval(self, lower, upper, full, sizing.driver_lookups)
        with self._sized(sizing), ThreadPoolExecutor(max_workers=PARALLEL_TRACES) as pool:
            # Traces of one depth depend only on shallower ones: write them side by
            # side, so Spark overlaps their small jobs instead of running one at a time.
            def bring(node: n.Node) -> None:
                with profiler.trace(_label(node)):
                    interval.delta(node)
                if on_trace is not None:
                    on_trace(node)

            def release(node: n.Node) -> None:
                with profiler.trace(_label(node)):
                    self._release(node, upper)

            for layer in self.layers(chosen, unmaintained):
                list(pool.map(bring, layer))
            list(pool.map(release, self.stateful_nodes(chosen, unmaintained)))
        report.views = {v: interval.written.get(self.flow.views[v].id, 0) for v in chosen}
        report.rounds = interval.rounds
        return report

    def records_read(
        self, views: Sequence[str], unmaintained: Collection[str], full: Collection[str], lower: int
    ) -> int:
        """Source records a run from ``lower`` takes in, plus all records of the
        sources a recomputed view reads, as the trace logs count them (no Spark job)."""
        start = Antichain.from_epoch(lower)
        nodes = self.stateful_nodes(views, unmaintained)
        records = sum(
            self.trace(x).state.records_from(start) for x in nodes if isinstance(x, n.Source)
        )
        for view in full:
            for source in (x for x in self.upstream_of(view) if isinstance(x, n.Source)):
                records += self.trace(source).state.records
        return records

    @contextmanager
    def _sized(self, sizing: Sizing) -> Iterator[None]:
        """Run the block with Spark settings and batch writes sized for ``sizing``."""

        def use(chosen: Sizing) -> None:
            self._sizing = chosen
            for trace in self._traces.values():
                trace.delta_storage.one_task_writes = chosen.one_task_writes

        use(sizing)
        try:
            with applied(self.spark, sizing):
                yield
        finally:
            use(LARGE)

    def choose_refresh(self, views: Sequence[str]) -> dict[str, RefreshChoice]:
        """How each of ``views`` with epochs pending is brought up to date (logged)."""
        choices: dict[str, RefreshChoice] = {}
        for name in (v for v in views if self._behind(v)):
            view = self.flow.views[name]
            start = epoch_of(self.trace(view).reload().upper)
            policy = self.flow.refresh_policy(name)
            sizes = pending_records(self, view) if policy.policy == "auto" else (0, 0)
            choices[name] = choose(name, policy, *sizes, first_build=start == 0)
            log.info("view %s: %s", name, choices[name])
        return choices

    def _behind(self, view: str) -> bool:
        """Whether the sources ``view`` reads hold epochs it has not computed."""
        start = epoch_of(self.trace(self._view(view)).reload().upper)
        sources = [x for x in self.upstream_of(view) if isinstance(x, n.Source)]
        return not sources or start < min(epoch_of(self.trace(s).reload().upper) for s in sources)

    def dependants(self, views: Sequence[str]) -> list[str]:
        """``views`` and every view that reads one of them, directly or through others."""
        chosen = {self._view(v).id for v in views}
        return [name for name in self.flow.views if chosen & {x.id for x in self.upstream_of(name)}]

    def upstream_of(self, view: str) -> list[n.Node]:
        return upstream([self._view(view)])

    def readable_from(self, view: str) -> int:
        """The first epoch ``view`` can be recomputed as of: its sources' history
        before their ``since`` is compacted, so no recomputation can tell it apart."""
        sources = [x for x in self.upstream_of(view) if isinstance(x, n.Source)]
        return max((self.trace(s).reload().since.epoch_bound() or 0 for s in sources), default=0)

    def rebuild(self, views: Sequence[str]) -> list[str]:
        """Discard the results of ``views`` and of the views that read them, so the next
        ``run`` recomputes them from the sources.

        The old trace directory is first renamed away (atomic), then deleted: a crash
        leaves either the old results or none, never a mix. Internal traces need no
        reset: their names are structural ids, so a changed definition has new ones.
        The rebuilt views can be read as of the sources' ``since`` onwards only.
        """
        names = self.dependants(views)
        for name in names:
            node = self.flow.views[name]
            since = Antichain.from_epoch(self.readable_from(name))
            self.discard(node)
            trace = self.trace(node)
            trace.downgrade_reader(RUNTIME_READER, since, since)
            trace.downgrade_reader(RETENTION_READER, since)
        return names

    def _discard_unmaintained(self, recomputed: Collection[str]) -> None:
        """Drop the operator state of recomputed views that no maintained view
        shares: left behind, it would hold the sources' compaction back."""
        for name in recomputed:
            for node in private_state(self, self.flow.views[name], recomputed):
                self.discard(node)

    def discard(self, node: n.Node) -> None:
        """Delete a node's trace (and a loop's inner traces): each is renamed away
        first (atomic), so a crash leaves either all of it or none."""
        assert node.trace_name is not None
        names = [node.trace_name]
        if isinstance(node, n.Iterate):
            names += [node.inner_trace_name(x) for x in inner_traces(node)]
        for name in names:
            self._traces.pop(name, None)
            discard_table(Path(self.flow.warehouse) / name)

    def layers(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> list[list[n.Node]]:
        """The stateful nodes grouped by how many traces lie between them and the sources."""
        depth: dict[str, int] = {}

        def depth_of(node: n.Node) -> int:
            if node.id not in depth:
                below = max((depth_of(i) for i in node.inputs), default=0)
                depth[node.id] = below + (1 if node.inputs and node.trace_name else 0)
            return depth[node.id]

        layers: dict[int, list[n.Node]] = {}
        for node in self.stateful_nodes(views, recomputed):
            layers.setdefault(depth_of(node), []).append(node)
        return [layers[d] for d in sorted(layers)]

    def _release(self, node: n.Node, upper: int) -> None:
        """Move this runtime's holds to ``upper - 1``: the next run reads only history
        before ``upper``."""
        trace = self.trace(node)
        hold = Antichain.from_epoch(upper - 1)
        trace.downgrade_reader(RUNTIME_READER, hold, hold)
        if isinstance(node, n.Iterate):
            for inner in inner_traces(node):
                history = self.loop_trace(node, inner)
                inner_hold = Antichain.of((upper - 1,) + (0,) * (history.state.dims - 1))
                history.downgrade_reader(RUNTIME_READER, inner_hold, inner_hold)
        if isinstance(node, n.View) and self.retain_epochs is not None:
            keep = Antichain.from_epoch(max(0, upper - 1 - self.retain_epochs))
            current = trace.state.hold_map[RETENTION_READER].logical
            trace.downgrade_reader(RETENTION_READER, current.join(keep))

    # ---------------------------------------------------------------- reading

    def read(self, view: str, as_of: int | None = None) -> DataFrame:
        """The view's rows at epoch ``as_of`` (default: latest), with bag semantics:
        each row repeated by its multiplicity."""
        trace = self._view_trace(view)
        at = None if as_of is None else (as_of,)
        acc = trace.read_at(at)
        data = [c for c in acc.columns if c != DIFF]
        negative = acc.where(F.col(DIFF) < 0).limit(1).collect()
        if negative:
            raise PlanError(f"view {view!r} has a negative multiplicity: {negative[0].asDict()}")
        return acc.select(*data, F.explode(F.sequence(F.lit(1), F.col(DIFF)))).select(*data)

    def _view_trace(self, view: str) -> DeltaTrace:
        """The view's trace as last committed: since this runtime last looked, another
        process may have run epochs, and maintenance may have merged its batches and
        vacuumed the files they replaced."""
        trace = self.trace(self._view(view))
        trace.reload()
        return trace

    def changes(self, view: str, from_epoch: int, to_epoch: int) -> DataFrame:
        """The view's consolidated changes at epochs ``[from_epoch, to_epoch)``:
        rows with ``_time`` and ``_diff``."""
        trace = self._view_trace(view)
        if from_epoch > 0 and not trace.state.since.less_equal_time((from_epoch - 1,)):
            # times before from_epoch may have been advanced into the interval
            raise SinceViolation(trace.name, from_epoch - 1, trace.state.since)
        df = trace.updates(at=(to_epoch - 1,), since=(from_epoch,))
        df = df.where((F.col(TIME) >= from_epoch) & (F.col(TIME) < to_epoch))
        return linear.consolidate(df.drop(KEY_HASH))

    def _view(self, name: str) -> n.View:
        if name not in self.flow.views:
            raise PlanError(f"unknown view {name!r}; views are {sorted(self.flow.views)}")
        return self.flow.views[name]


def trace_key(node: n.Node) -> tuple[str, ...]:
    """The columns a node's trace is keyed (hashed, sorted, looked up) by."""
    if isinstance(node, n.Source | n.Arrange | n.Reduce | n.Accumulate):
        return node.key
    return tuple(node.columns)


def _keyed_by(node: n.Node, key: Sequence[str]) -> bool:
    """Whether ``node`` keeps a trace keyed by exactly ``key``: its changes' key
    hashes are then those of ``key``, in that order."""
    return node.trace_name is not None and trace_key(node) == tuple(key)


def _label(node: n.Node) -> str:
    return node.trace_name or node.id


def upstream(roots: Sequence[n.Node], recomputed: Collection[str] = ()) -> list[n.Node]:
    """``roots`` and every node they read, each once, inputs before their users.
    Under a view in ``recomputed`` only sources and views count."""
    seen: dict[str, n.Node] = {}
    passed: set[str] = set()  # under a recomputed view only

    def visit(node: n.Node, kept: bool) -> None:
        kept = kept or isinstance(node, n.Source | n.View)
        if node.id in seen or (not kept and node.id in passed):
            return
        inside = kept and not (isinstance(node, n.View) and node.name in recomputed)
        for i in node.inputs:
            visit(i, inside)
        if kept:
            seen[node.id] = node
        else:
            passed.add(node.id)

    for root in roots:
        visit(root, True)
    return list(seen.values())


class _Interval:
    """The changes of every node for one run's interval ``[lower, upper)``."""

    def __init__(
        self,
        runtime: Runtime,
        lower: int,
        upper: int,
        recomputed: Collection[str] = (),
        driver_lookups: bool = False,
    ) -> None:
        self.rt = runtime
        self.lower = lower
        self.upper = upper
        self.recomputed = recomputed
        self.driver_lookups = driver_lookups
        self._deltas: dict[str, DataFrame] = {}
        self._touched: dict[str, list[int]] = {}
        self._unchanged: dict[str, bool] = {}
        self.written: dict[str, int] = {}  # records appended per node by this run
        self.rounds: list[Round] = []

    def delta(self, node: n.Node) -> DataFrame:
        if node.id not in self._deltas:
            self._deltas[node.id] = self._compute(node)
        return self._deltas[node.id]

    def _from_trace(self, node: n.Node, compute: Callable[[], DataFrame] | None) -> DataFrame:
        trace = self.rt.trace(node)
        start = epoch_of(trace.state.upper)  # fresh: pending() reloaded every trace
        if compute is not None and start < self.upper:
            lower, upper = Antichain.from_epoch(start), Antichain.from_epoch(self.upper)
            if self._unchanged_inputs(node):
                # nothing in, nothing out: an empty batch, committed without a Spark job
                appended = trace.compare_and_append(
                    self.rt.flow.empty_updates(node.schema), lower, upper, at_most=0
                )
            else:
                changes = compute().where(F.col(TIME) >= start)
                appended = trace.compare_and_append(changes, lower, upper)
            if appended:
                # the new batch, unless back-pressure already merged it away
                self.written[node.id] = sum(
                    b.records
                    for b in trace.state.batches
                    if b.description.lower == lower and b.description.upper == upper
                )
        # only files that can hold the interval's times: the batches this run appended
        df = trace.updates(at=(self.upper - 1,), since=(self.lower,))
        df = df.where((F.col(TIME) >= self.lower) & (F.col(TIME) < self.upper))
        return df.select(*node.columns, TIME, DIFF)

    def _unchanged_inputs(self, node: n.Node) -> bool:
        """Whether ``node``'s output surely has no changes in the interval because its
        inputs have none: true of arrangements, reductions, accumulations and
        incrementally kept views (a loop or a recomputed view is always computed)."""
        if isinstance(node, n.View) and node.name in self.recomputed:
            return False
        kinds = n.Arrange | n.View | n.Reduce | n.Accumulate
        return isinstance(node, kinds) and all(self.unchanged(i) for i in node.inputs)

    def unchanged(self, node: n.Node) -> bool:
        """Whether ``node`` surely has no changes in ``[lower, upper)``, as the trace
        logs tell (no Spark job): a trace with no records in the interval's batches,
        or an operator whose inputs all have none."""
        if node.id not in self._unchanged:
            if node.trace_name is not None:
                self.delta(node)  # computed and appended first, as a user would see it
                state = self.rt.trace(node).state
                self._unchanged[node.id] = state.records_from(Antichain.from_epoch(self.lower)) == 0
            elif isinstance(node, n.Constant):
                self._unchanged[node.id] = self.lower > 0
            else:
                self._unchanged[node.id] = all(self.unchanged(i) for i in node.inputs)
        return self._unchanged[node.id]

    def history(
        self, node: n.Node, before: int | None = None, probe: n.Node | None = None
    ) -> Callable[[DataFrame], DataFrame]:
        """The node's trace accumulated before epoch ``before`` (default: the run's
        lower), for keys that (when ``probe`` is given) are among those ``probe``'s
        changes in the interval touch, in the same key columns, in order."""
        at = (self.lower if before is None else before) - 1

        def read(keys: DataFrame) -> DataFrame:
            if at < 0:
                return self.rt.flow.empty_updates(node.schema).drop(TIME)
            trace = self.rt.trace(node)
            return trace.read_at((at,), keys=keys, key_hashes=self._touched_hashes(probe, trace))

        return read

    def _touched_hashes(self, probe: n.Node | None, target: DeltaTrace) -> list[int] | None:
        """The key hashes ``probe``'s changes in the interval touch, as ``target``
        hashes keys (None if unknown): read from the batch ``probe`` appended, so a
        lookup reads only those keys' rows and costs no job to find them."""
        if not self.driver_lookups or probe is None or probe.trace_name is None:
            return None
        source = self.rt.trace(probe)
        if source.key_types != target.key_types:
            return None  # equal keys of other types hash differently
        if probe.id not in self._touched:
            self.delta(probe)  # appended first
            self._touched[probe.id] = source.key_hashes_since((self.lower,))
        return self._touched[probe.id]

    def _compute(self, node: n.Node) -> DataFrame:
        ins = node.inputs
        if isinstance(node, n.Source):
            return self._from_trace(node, None)
        if isinstance(node, n.Constant):
            if self.lower > 0:
                return self.rt.flow.empty_updates(node.schema)
            return self.rt.flow.constant_updates(node)
        done = apply_linear(node, self.delta)
        if done is not None:
            return done
        if isinstance(node, n.View) and node.name in self.recomputed:
            start = epoch_of(self.rt.trace(node).state.upper)
            return self._from_trace(node, lambda: full_changes(self.rt, node, start, self.upper))
        if isinstance(node, n.Arrange | n.View):
            return self._from_trace(node, lambda: self.delta(ins[0]))
        if isinstance(node, n.Join):
            left, right = ins
            probes = _keyed_by(left, node.left_key) and _keyed_by(right, node.right_key)
            return delta_join(
                self.delta(left),
                self.delta(right),
                self.history(left, probe=right if probes else None),
                self.history(right, probe=left if probes else None),
                node.left_key,
                node.right_key,
                left.columns,
                node.right_columns,
                self.lower - 1,
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
                self.lower - 1,
            )
        if isinstance(node, n.Accumulate):
            # Continue from the sums the trace holds, not from the run's lower: adding
            # earlier epochs again, in another order, can change a float sum's last
            # bits, and the retraction of the stored row would then not match it.
            start = epoch_of(self.rt.trace(node).state.upper)
            return self._from_trace(
                node,
                lambda: delta_accumulate(
                    self.delta(ins[0]).where(F.col(TIME) >= start),
                    self.history(node, start),
                    node.key,
                    node.values,
                ),
            )
        if isinstance(node, n.Reduce):
            reducer = reducer_for(node)
            probe = ins[0] if _keyed_by(ins[0], node.key) else None
            return self._from_trace(
                node,
                lambda: delta_reduce(
                    self.delta(ins[0]),
                    self.history(ins[0], probe=probe),
                    self.history(node, probe=probe),
                    node.key,
                    node.columns,
                    reducer,
                    self.lower - 1,
                ),
            )
        if isinstance(node, n.Iterate):
            return self._from_trace(node, lambda: self._iterate(node))
        raise PlanError(f"no runtime rule for operator {type(node).__name__}")

    def _iterate(self, loop: n.Iterate) -> DataFrame:
        start = epoch_of(self.rt.trace(loop).state.upper)
        views = [v for v in self.rt.flow.views if loop.id in {x.id for x in self.rt.upstream_of(v)}]
        run = LoopRun(self.rt, loop, self.delta, views)
        try:
            return run.run(start, self.upper)
        finally:
            self.rounds.extend(run.rounds)
