"""Run a loop (``Iterate``) to its fixed point, epoch by epoch, round by round.

Within an epoch ``e``, round ``i`` processes every update at time ``(e, i)``:
the variable's, each arrangement's, and the keys reductions scheduled for
``i``. Updates a round produces at later iterations wait, *staged*, in the
arrangement (or the variable) that receives them until their round; rounds
with nothing to do are skipped. The epoch is done when nothing is staged after
the current round.

A loop in the body runs inside each round ``i`` of the loop around it, with
rounds ``(i, j)``; its nodes carry both iterations. Rounds run in
lexicographic order, which extends the product order, so the rule stays the
same at any depth: when round ``t`` runs, everything before ``t`` is done.

Then each arrangement and reduction of the loop nest appends its updates of
the epoch, at times ``(e, i…)``, to its trace: a Delta trace of product times,
``[(e, 0…), (e + 1, 0…))``; in a small interval one Spark job computes all
their batches. Later epochs look their history up there.
Compacting it advances epochs but never merges iterations: ``advance((e', j),
{(e, 0)}) = (e, j)``, so the history of a key is bounded by the iterations at
which it ever changed, not by the number of epochs.

A crash before the loop's result is committed leaves some inner traces one
epoch ahead; the re-run recomputes the epoch from the same history (reads are
bounded by ``e``), and those appends are no-ops.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.failpoints import failpoint
from dd_etl.lattice import Antichain
from dd_etl.operators import linear
from dd_etl.operators.iterative import Known, LoopTime, iterations
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import PlanError
from dd_etl.plan.loops import body_of, histories_read, inner_traces, loop_nest
from dd_etl.runtime.loop_epoch import (
    STAGED,
    Entered,
    EpochState,
    Work,
    home,
    next_iteration,
    pad,
)
from dd_etl.runtime.rules import rule_for
from dd_etl.spark_memory import SparkMemory
from dd_etl.trace.batch_writer import TraceAppend, write_together
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.placement import Placement

if TYPE_CHECKING:
    from dd_etl.runtime.catalog import TraceCatalog


class LoopDiverged(PlanError):
    """An epoch of a loop needed more iterations than its limit allows."""

    def __init__(self, views: list[str], epoch: int, limit: int) -> None:
        what = ", ".join(repr(v) for v in views) or "a loop"
        super().__init__(
            f"view {what}: the loop did not reach a fixed point within {limit} iterations "
            f"at epoch {epoch}; check that its body converges (e.g. distances that keep "
            f"growing around a cycle), or raise max_iterations"
        )
        self.views = views
        self.epoch = epoch


@dataclass(frozen=True)
class Round:
    """What one round of a loop did: the updates at ``(epoch, *within, iteration)``
    across the variable, the arrangements and the reductions of its body
    (``within``: the iterations of the loops around it, if it is nested)."""

    loop: str
    epoch: int
    iteration: int
    updates: int
    within: tuple[int, ...] = ()


Entering = Callable[[n.Node], Entered]
"""A collection's changes entering a loop at the round of the scope around it."""


class LoopRun:
    """One top-level ``Iterate`` node, with the loops nested in it, over the epochs
    of a run."""

    def __init__(
        self,
        traces: TraceCatalog,
        loop: n.Iterate,
        outer: Callable[[n.Node], DataFrame],
        views: list[str],
        placement: Placement,
        memory: SparkMemory,
    ) -> None:
        self.traces = traces
        self.loop = loop
        self.outer = outer  # the run's changes of a collection outside the loop
        self.views = views
        self.placement = placement  # where the interval's reads and writes run; in the
        # driver's (a small interval), the epoch's state is held there too
        self.memory = memory  # what the jobs writing its inner traces share
        self.nest = loop_nest(loop)
        self.traced = inner_traces(loop)
        self.histories = histories_read(loop)
        self.rounds: list[Round] = []
        self._nests: dict[str, set[str]] = {}
        self._nothing: dict[tuple[str, int], DataFrame] = {}

    def nothing(self, node: n.Node, depth: int) -> DataFrame:
        """No updates of ``node`` inside ``depth`` loops (made once: every round
        asks for them)."""
        if (node.id, depth) not in self._nothing:
            empty = self.traces.flow.empty_updates(node.schema).select(*node.columns, DIFF)
            self._nothing[node.id, depth] = pad(empty, depth)
        return self._nothing[node.id, depth]

    def nest_of(self, loop: n.Iterate) -> set[str]:
        """The ids of the nodes inside ``loop`` (this loop or one nested in it)."""
        if loop.id not in self._nests:
            self._nests[loop.id] = set(loop_nest(loop))
        return self._nests[loop.id]

    def run(self, start: int, upper: int) -> DataFrame:
        """The loop's output changes at epochs ``[start, upper)``, its inner traces
        appended up to ``upper``."""
        for node in self.traced:  # maintenance elsewhere may have merged batches
            self.traces.loop_trace(self.loop, node).reload()
        outputs = [self._epoch(e) for e in range(start, upper)]
        return functools.reduce(DataFrame.unionByName, outputs)

    # ----------------------------------------------------------------- epochs

    def _epoch(self, e: int) -> DataFrame:
        st = EpochState(self, e)
        # Read together, histories cost one job in a small interval; in a large one
        # each is checkpointed on its own anyway, so only those a round reads are.
        st.begin(self.loop.inputs, self.histories if self.placement.driver else [])
        leave = self.scope(self.loop, st, (), st.entered)

        traces = [self.traces.loop_trace(self.loop, x) for x in self.traced]
        zeros = [(0,) * (trace.state.dims - 1) for trace in traces]
        appends = [
            TraceAppend(
                trace,
                st.staged(x).withColumn(TIME, F.lit(e).cast("long")),
                Antichain.of((e, *z)),
                Antichain.of((e + 1, *z)),
                self.placement,
                at_most=st.counted.staged_in_all(home(x).id),
                label=trace.name,
            )
            for x, trace, z in zip(self.traced, traces, zeros, strict=True)
        ]
        # separate traces: computed together, committed side by side
        with ThreadPoolExecutor(max_workers=len(traces) or 1) as pool:
            write_together(appends, self.placement, self.memory, pool)
        failpoint("loop.epoch_appended")
        return linear.consolidate(leave.withColumn(TIME, F.lit(e).cast("long")))

    def scope(
        self, loop: n.Iterate, st: EpochState, prefix: LoopTime, outer: Entering
    ) -> DataFrame:
        """Run ``loop`` to its fixed point at ``prefix``, the iterations of the loops
        around it (none for the top loop), given ``outer``, the changes at
        ``prefix`` of what enters it. Returns its output's changes at ``prefix``.

        The initial collection enters at iteration 0 and is withdrawn at 1, so
        from then on the variable holds only what the body fed back: summed over
        the iterations, the variable's updates are the result's changes."""
        depth = len(prefix) + 1
        entering = {x.id: outer(x) for x in loop.inputs}
        work = st.work(loop, prefix, entering)
        initial = work.entering(loop.inputs[0].id)
        if initial:
            entered = pad(entering[loop.inputs[0].id].frame, depth)
            last = iterations(depth)[-1]
            withdrawn = linear.negate(entered.withColumn(last, F.lit(1).cast("long")))
            st.stage(loop.variable, entered.unionByName(withdrawn))
            work = work.plus((STAGED, loop.variable.id, 0), initial)
        k = min(work.iterations(), default=None)
        while k is not None:
            if k > loop.limit:
                raise LoopDiverged(self.views, st.epoch, loop.limit)
            self._round(loop, st, (*prefix, k), outer, work)
            work = st.work(loop, prefix, entering if k == 0 else {})
            self.rounds.append(Round(loop.id, st.epoch, k, work.updates(k), prefix))
            k = min((j for j in work.iterations() if j > k), default=None)
        if not prefix:
            st.counted = work  # counted after the last round: every update the epoch staged
        return st.leaving(loop.variable, prefix)

    # ----------------------------------------------------------------- rounds

    def _round(
        self, loop: n.Iterate, st: EpochState, t: LoopTime, outer: Entering, work: Work
    ) -> None:
        """Round ``t``: every node of the body applied by its kind's rule to its
        inputs' updates at ``t`` (``in_loop``). A node none of whose inputs changed
        at ``t``, with nothing staged or scheduled there, is skipped without
        running anything. The result's updates are fed back to the variable."""
        current = _Round(self, st, t, outer, work)
        for node in body_of(loop):
            current.emit(node)
        if current.live(loop.result):
            last = iterations(len(t))[-1]
            fed_back = current.rows(loop.result)
            st.stage(
                loop.variable,
                current.changes(loop.result).withColumn(last, F.col(last) + 1),
                rows=None if fed_back is None else next_iteration(fed_back, last),
            )


class _Round:
    """One round ``t`` of a loop at one epoch, as its rules see it
    (``RoundScope``): what the nodes run so far emitted at ``t``, with the
    driver's rows of it where it holds them, and the epoch's staged updates."""

    def __init__(
        self, run: LoopRun, st: EpochState, t: LoopTime, outer: Entering, work: Work
    ) -> None:
        self.run = run
        self.st = st
        self.t = t
        self.outer = outer  # from outside this loop: what entered at ``t``
        self.work = work
        self.emitted: dict[str, DataFrame | None] = {}
        self.held: dict[str, pa.Table | None] = {}  # the driver's rows of ``emitted``

    def emit(self, node: n.Node) -> None:
        rule = rule_for(node)
        self.emitted[node.id] = rule.in_loop(node, self)
        if self.emitted[node.id] is not None:
            self.held[node.id] = rule.rows_in_loop(node, self)

    def changes(self, node: n.Node) -> DataFrame:
        if node.id in self.emitted:
            done = self.emitted[node.id]
            return self.st.nothing(node, len(self.t)) if done is None else done
        # From outside this loop: what entered at ``t`` minus its last iteration.
        if self.live(node):
            return pad(self.outer(node).frame, len(self.t))
        return self.st.nothing(node, len(self.t))

    def live(self, node: n.Node) -> bool:
        if node.id in self.emitted:
            return self.emitted[node.id] is not None
        return self.t[-1] == 0 and self.work.entering(node.id) > 0

    def rows(self, node: n.Node) -> pa.Table | None:
        return self.held.get(node.id)

    def staged(self, node: n.Node) -> bool:
        return self.work.staged(home(node).id, self.t[-1]) > 0

    def due(self, node: n.Node) -> bool:
        return self.work.due(node.id, self.t[-1]) > 0

    def at(self, node: n.Node) -> DataFrame:
        return self.st.at(node, self.t)

    def rows_at(self, node: n.Node) -> pa.Table | None:
        return self.st.rows_at(node, self.t)

    def due_keys(self, node: n.Reduce) -> DataFrame:
        return self.st.due(node, self.t)

    def known(self, node: n.Node) -> Known:
        return self.st.known(node, len(self.t))

    def before(self, node: n.Node) -> Known:
        return self.st.before(node, self.t)

    def stage(self, node: n.Node, updates: DataFrame, rows: pa.Table | None = None) -> None:
        self.st.stage(node, updates, rows=rows)

    def reconsider(self, node: n.Reduce, updates: DataFrame, later: DataFrame) -> None:
        self.st.stage(node, updates, scheduled=(later, self.t))

    def busy(self, loop: n.Iterate) -> bool:
        return self.work.busy(self.run.nest_of(loop), self.t[-1])

    def nested(self, loop: n.Iterate) -> DataFrame:
        return self.run.scope(loop, self.st, self.t, self.entered)

    def entered(self, node: n.Node) -> Entered:
        """``changes(node)`` entering a loop nested in this one, counted where the
        driver holds its rows (none, when ``node`` did not change)."""
        changes = self.changes(node)
        if not self.live(node):
            return Entered(changes, 0)
        if node.id not in self.emitted:  # from outside this loop too, as it entered here
            return Entered(changes, self.outer(node).rows)
        known = self.held.get(node.id)
        return Entered(changes, None if known is None else known.num_rows)
