"""The runtime of one dataflow: the catalog of its traces under the warehouse
root, and what users do with them (append source changes, run, read a view as
of an epoch, its changes, rebuild, discard).

A run's execution, from what is pending to the last commit, is
``runtime/execution.py``. After a run, the runtime's hold on every trace is at
``upper - 1``: the next run reads history strictly before its ``lower``, which
may then be compacted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.failpoints import failpoint
from dd_etl.lattice import Antichain, meet_all
from dd_etl.operators import linear
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import Dataflow, PlanError
from dd_etl.plan.graph import dependants, layers, stateful, trace_key, upstream
from dd_etl.plan.loops import inner_traces, loop_nest
from dd_etl.plan.refresh import RefreshChoice, choose
from dd_etl.profiling import SPARK, phase
from dd_etl.runtime.catalog import readable_from
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.execution import RunReport, execute
from dd_etl.runtime.full_refresh import pending_records, private_state
from dd_etl.runtime.holds import RuntimeHolds
from dd_etl.runtime.sizing import DEFAULT_THRESHOLDS, Sizing, Thresholds
from dd_etl.spark_driver import driver_for
from dd_etl.trace import deferred_log
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME
from dd_etl.trace.deferred import DeferredAppend
from dd_etl.trace.delta_trace import DeltaTrace, discard_table
from dd_etl.trace.errors import SinceViolation
from dd_etl.trace.placement import BULK, Placement
from dd_etl.trace.reader_handle import HoldChange

log = logging.getLogger(__name__)

PLAN_META = "plan"
"""Trace meta key of a view: the structural id of the definition that computes it."""
LINEAGE_META = "sources"
"""Trace meta key of every trace but a source's: the generation of each source it is
computed from (JSON, by source name). A source started over is a new generation,
whose history is not the one the trace took in (``Runtime.discard_stale``)."""


def source_records(updates: DataFrame, sizing: Sizing) -> int | None:
    """How many records a source's changes hold, where Spark writes them: counted
    without caching them (of files, Spark counts from their footers), so that the
    write sizes its slices by the count and reads the changes once, where a
    cached count would compute and hold them all first. None for a small
    interval's, which the driver collects up to a bound of its own."""
    if sizing.driver_rows:
        return None
    with phase(SPARK):
        return updates.count()


class PlanChanged(PlanError):
    """A view's trace was computed by a different definition than the current one."""

    exit_code = 4  # needs a rebuild, as a source that lost history does

    def __init__(self, view: str, built: str, current: str) -> None:
        super().__init__(
            f"view {view!r} changed since its results were computed (plan {built} then, "
            f"{current} now); rebuild it to recompute it from scratch"
        )
        self.view = view


class Runtime:
    """Owns the traces of one dataflow under its warehouse root."""

    def __init__(
        self,
        flow: Dataflow,
        retain_epochs: int | None = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.flow = flow
        self.spark = flow.spark
        self.retain_epochs = retain_epochs
        self.thresholds = thresholds
        """The sizes that choose where the runs' work happens."""
        self._traces: dict[str, DeltaTrace] = {}
        self._holds: dict[str, RuntimeHolds] = {}
        """The runtime's handles on each of its traces (by name): only they move its holds."""
        self._deferred = deferred_log.read(flow.warehouse)
        """The empty appends the warehouse's runs deferred, as last read or recorded."""

    # ------------------------------------------------------------------ traces

    def trace(self, node: n.Node) -> DeltaTrace:
        name = node.trace_name
        assert name is not None
        if name not in self._traces:
            meta = self._recorded(node)
            trace = self._created(name, node, meta=meta)
            trace.defer(self._deferred.appends.get(name))
            self._holds[name] = RuntimeHolds.open(trace, retains=isinstance(node, n.View))
            missing = {k: v for k, v in meta.items() if k not in trace.state.meta_map}
            if missing:  # a trace created by an earlier version of dd_etl
                trace.annotate(missing)
            self._traces[name] = trace
        return self._traces[name]

    def _created(
        self, name: str, node: n.Node, dims: int = 1, meta: dict[str, str] | None = None
    ) -> DeltaTrace:
        """The trace ``name`` of ``node``'s updates, created if it does not exist."""
        merged = self.thresholds.driver_merge_records
        return DeltaTrace.create(
            self.spark,
            self.flow.warehouse / name,
            name,
            node.schema,
            trace_key(node),
            dims,
            meta=meta,
            driver_merged=merged,
        )

    def _recorded(self, node: n.Node) -> dict[str, str]:
        """What a node's trace records from its creation on: the sources' generations
        it is computed from, and a view's plan."""
        if isinstance(node, n.Source):
            return {}
        meta = {LINEAGE_META: json.dumps(self._lineage(node), sort_keys=True)}
        if isinstance(node, n.View):
            meta[PLAN_META] = node.plan
        return meta

    def _lineage(self, node: n.Node) -> dict[str, str]:
        """The generation of each source ``node`` is computed from, by name."""
        sources = (x for x in upstream([node]) if isinstance(x, n.Source))
        return {s.name: self.trace(s).generation for s in sources}

    def loop_trace(self, loop: n.Iterate, node: n.Node) -> DeltaTrace:
        """The product-time trace a node inside ``loop`` (or a loop nested in it)
        keeps its history in: times ``(epoch, i1, …)``, one iteration per loop
        around the node."""
        name = loop.inner_trace_name(node)
        if name not in self._traces:
            trace = self._created(name, node, dims=1 + loop_nest(loop)[node.id][1])
            self._holds[name] = RuntimeHolds.open(trace, retains=False)
            self._traces[name] = trace
        return self._traces[name]

    def stateful_nodes(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> list[n.Node]:
        """Every node with a trace that ``views`` (default: all) depend on, inputs
        before users. Of a view in ``recomputed`` (default: those whose refresh
        policy is ``full``) only the sources and views it reads: its operator
        state is not maintained."""
        roots = self.flow.views.values() if views is None else [self.view(v) for v in views]
        if recomputed is None:
            policies = {v: self.flow.refresh_policy(v).policy for v in self.flow.views}
            recomputed = [v for v, policy in policies.items() if policy == "full"]
        return stateful(list(roots), recomputed)

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
        Changes Spark estimates small are written by the driver, others by Spark.
        """
        updates = self.source_updates(name, changes, epoch)
        sizing = self.thresholds.for_bytes(
            driver_for(updates.sparkSession).estimated_bytes(updates)
        )
        return self.trace(self.flow.sources[name]).compare_and_append(
            updates,
            Antichain.from_epoch(epoch),
            Antichain.from_epoch(epoch + 1),
            meta,
            at_most=source_records(updates, sizing),
            placement=sizing.placement,
        )

    def source_updates(self, name: str, changes: DataFrame, epoch: int) -> DataFrame:
        """A source's changes as its trace's updates at ``epoch``."""
        if name not in self.flow.sources:
            raise PlanError(f"unknown source {name!r}; sources are {sorted(self.flow.sources)}")
        if DIFF not in changes.columns:
            changes = changes.withColumn(DIFF, F.lit(1).cast("long"))
        return changes.withColumn(TIME, F.lit(epoch).cast("long"))

    # -------------------------------------------------------------------- run

    def pending(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> tuple[int, int]:
        """The epochs ``[lower, upper)`` a run of ``views`` has to compute."""
        self._read_deferred()
        nodes = self.stateful_nodes(views, recomputed)
        sources = [x for x in nodes if isinstance(x, n.Source)]
        upper = epoch_of(meet_all(self.trace(s).reload().upper for s in sources)) if sources else 0
        maintained = [x for x in nodes if not isinstance(x, n.Source)]
        lower = min((epoch_of(self.trace(x).reload().upper) for x in maintained), default=upper)
        return lower, upper

    def _read_deferred(self) -> None:
        """Read the empty appends deferred since this runtime last looked (by runs
        in other processes) into the traces it has open."""
        latest = deferred_log.read(self.flow.warehouse)
        if latest.version != self._deferred.version:
            self._deferred = latest
            for name, trace in self._traces.items():
                trace.defer(latest.appends.get(name))

    def record_deferred(self, appends: Mapping[str, DeferredAppend]) -> None:
        """Record the empty appends a run deferred (``Trace.deferred_to``) in one
        commit, where each would have been a commit of its trace; with them, drop
        the deferrals that no longer hold for a trace this runtime has open (its
        log moved on)."""
        stale = [
            name
            for name, deferred in self._deferred.appends.items()
            if name in self._traces and not deferred.holds_for(self._traces[name].snapshot.state)
        ]
        if appends or stale:
            self._deferred = deferred_log.record(self.flow.warehouse, appends, stale)

    def discard_stale(self, nodes: Sequence[n.Node]) -> list[n.Node]:
        """Discard the traces among ``nodes`` computed from a generation of a source
        that was started over since (``rebuild --source`` after its columns
        changed): its new history holds everything it holds now, and continuing
        from the old one would take all of it in again on top. Each is judged by
        what it recorded itself, so a crash between two discards leaves the rest
        to the next run. Returns the nodes discarded; the run recomputes them."""
        stale = []
        for node in nodes:
            recorded = self.trace(node).state.meta_map.get(LINEAGE_META)
            if recorded is not None and json.loads(recorded) != self._lineage(node):
                stale.append(node)
                self._start_over(node)
        return stale

    def changed_plans(self, views: Sequence[str] | None = None) -> list[str]:
        """Those of ``views`` (default: all) whose definition changed since their
        trace was computed: it holds results of the old one."""
        names = list(self.flow.views) if views is None else views
        return [v for v in names if self._built_by(v) not in (None, self.view(v).plan)]

    def check_plans(self, views: Sequence[str] | None = None) -> None:
        """Refuse to continue a view whose definition changed: new changes on top of
        the old one's results would be neither's (``rebuild`` it first)."""
        for name in self.changed_plans(views):
            raise PlanChanged(name, self._built_by(name) or "", self.view(name).plan)

    def _built_by(self, view: str) -> str | None:
        return self.trace(self.view(view)).state.meta_map.get(PLAN_META)

    def run(
        self,
        on_trace: Callable[[n.Node], None] | None = None,
        views: Sequence[str] | None = None,
        refresh: Mapping[str, RefreshChoice] | None = None,
    ) -> RunReport:
        """Bring ``views`` (default: all) up to date, as far as the sources they read
        allow; ``on_trace(node)`` hears of each trace done. ``refresh``: how each
        view is brought up to date (default: ``choose_refresh``). The run is
        profiled (``RunReport.profile``)."""
        return execute(self, on_trace, views, refresh)

    def choose_refresh(self, views: Sequence[str]) -> dict[str, RefreshChoice]:
        """How each of ``views`` with epochs pending is brought up to date (logged)."""
        choices: dict[str, RefreshChoice] = {}
        for name in (v for v in views if self.behind(v)):
            view = self.flow.views[name]
            start = epoch_of(self.trace(view).reload().upper)
            policy = self.flow.refresh_policy(name)
            sizes = pending_records(self, view) if policy.policy == "auto" else (0, 0)
            choices[name] = choose(name, policy, *sizes, first_build=start == 0)
            log.info("view %s: %s", name, choices[name])
        return choices

    def behind(self, view: str) -> bool:
        """Whether the sources ``view`` reads hold epochs it has not computed."""
        start = epoch_of(self.trace(self.view(view)).reload().upper)
        sources = [x for x in self.upstream_of(view) if isinstance(x, n.Source)]
        return not sources or start < min(epoch_of(self.trace(s).reload().upper) for s in sources)

    def dependants(self, views: Sequence[str]) -> list[str]:
        """``views`` and every view that reads one of them, directly or through others."""
        chosen = {self.view(v).id for v in views}
        return [v.name for v in dependants(list(self.flow.views.values()), chosen)]

    def upstream_of(self, view: str) -> list[n.Node]:
        return upstream([self.view(view)])

    def readable_from(self, view: str) -> int:
        """The first epoch ``view`` can be recomputed as of (``catalog.readable_from``)."""
        return readable_from(self, self.view(view))

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
            self._start_over(self.flow.views[name])
        return names

    def _start_over(self, node: n.Node) -> None:
        """Discard ``node``'s trace for the next run to compute afresh; a view's is
        held where it can be recomputed as of, its sources' ``since``."""
        if not isinstance(node, n.View):
            self.discard(node)
            return
        since = Antichain.from_epoch(self.readable_from(node.name))
        self.discard(node)
        self._holds_on(node).restart(since)

    def discard_unmaintained(self, recomputed: Collection[str]) -> None:
        """Drop the operator state of recomputed views that no maintained view
        shares: left behind, it would hold the sources' compaction back."""
        for name in recomputed:
            for node in private_state(self.flow, self.flow.views[name], recomputed):
                self.discard(node)

    def discard(self, node: n.Node) -> None:
        """Delete a node's trace (and a loop's inner traces; ``discard_table``)."""
        assert node.trace_name is not None
        names = [node.trace_name]
        if isinstance(node, n.Iterate):  # its own last: it records what they came from
            names = [node.inner_trace_name(x) for x in inner_traces(node)] + names
        for name in names:
            self._traces.pop(name, None)
            self._holds.pop(name, None)
            discard_table(self.flow.warehouse / name)
            failpoint("trace.discarded")

    def layers(
        self, views: Sequence[str] | None = None, recomputed: Collection[str] | None = None
    ) -> list[list[n.Node]]:
        """The stateful nodes grouped by how many traces lie between them and the sources."""
        return layers(self.stateful_nodes(views, recomputed))

    def release(self, node: n.Node, upper: int) -> None:
        """Move this runtime's holds to ``upper - 1``: the next run reads only history
        before ``upper``."""
        self.trace(node).move_holds(self.released(node, upper - 1))
        if isinstance(node, n.Iterate):
            for inner in inner_traces(node):
                history = self.loop_trace(node, inner)
                inner_hold = Antichain.of((upper - 1,) + (0,) * (history.state.dims - 1))
                self._holds[node.inner_trace_name(inner)].reading.downgrade(inner_hold, inner_hold)

    def released(self, node: n.Node, through: int) -> HoldChange:
        """This runtime's holds on ``node``'s own trace moved forward to epoch
        ``through`` (never back): history before it is no longer read, and a view's
        past epochs are kept ``retain_epochs`` back from it."""
        keep = None
        if self.retain_epochs is not None:
            keep = Antichain.from_epoch(max(0, through - self.retain_epochs))
        return self._holds_on(node).released(Antichain.from_epoch(through), keep)

    def _holds_on(self, node: n.Node) -> RuntimeHolds:
        """The runtime's handles on ``node``'s own trace, opening it if need be."""
        self.trace(node)
        assert node.trace_name is not None
        return self._holds[node.trace_name]

    # ---------------------------------------------------------------- reading

    def read(
        self,
        view: str,
        as_of: int | None = None,
        placement: Placement = BULK,
        rows: DataFrame | None = None,
    ) -> DataFrame:
        """The view's rows at epoch ``as_of`` (default: latest), with bag semantics:
        each row repeated by its multiplicity, read as ``placement`` says; only those
        equal to one of ``rows`` when given (a look-up by the trace's key, the whole
        row). A negative multiplicity (a broken trace) fails the query that reads
        it, in its own Spark job rather than one more."""
        trace = self._view_trace(view)
        at = None if as_of is None else (as_of,)
        acc = trace.read_at(at, keys=rows, placement=placement)
        data = [c for c in acc.columns if c != DIFF]
        broken = F.lit(f"view {view!r} has a negative multiplicity: ")
        row = F.to_json(F.struct(*data, DIFF))
        copies = F.when(F.col(DIFF) < 0, F.raise_error(F.concat(broken, row)))
        copies = copies.otherwise(F.col(DIFF))
        return acc.select(*data, F.explode(F.sequence(F.lit(1), copies))).select(*data)

    def _view_trace(self, view: str) -> DeltaTrace:
        """The view's trace as last committed: since this runtime last looked, another
        process may have run epochs, and maintenance may have merged its batches and
        vacuumed the files they replaced."""
        trace = self.trace(self.view(view))
        trace.reload()
        return trace

    def changes(
        self, view: str, from_epoch: int, to_epoch: int, placement: Placement = BULK
    ) -> DataFrame:
        """The view's consolidated changes at epochs ``[from_epoch, to_epoch)``:
        rows with ``_time`` and ``_diff``, read as ``placement`` says."""
        trace = self._view_trace(view)
        if from_epoch > 0 and not trace.state.since.less_equal_time((from_epoch - 1,)):
            # times before from_epoch may have been advanced into the interval
            raise SinceViolation(trace.name, from_epoch - 1, trace.state.since)
        df = trace.updates(at=(to_epoch - 1,), since=(from_epoch,), placement=placement)
        return linear.consolidate(df.drop(KEY_HASH))

    def view(self, name: str) -> n.View:
        if name not in self.flow.views:
            raise PlanError(f"unknown view {name!r}; views are {sorted(self.flow.views)}")
        return self.flow.views[name]
