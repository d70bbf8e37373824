"""Run a loop (``Iterate``) to its fixed point, epoch by epoch, round by round.

Within an epoch ``e``, round ``i`` processes every update at time ``(e, i)``:
the variable's, each arrangement's, and the keys reductions scheduled for
``i``. Updates a round produces at later iterations wait, *staged*, in the
arrangement (or the variable) that receives them until their round; rounds
with nothing to do are skipped. The epoch is done when nothing is staged after
the current round.

Then each arrangement and reduction of the body appends its updates of the
epoch, at times ``(e, i)``, to its trace: a Delta trace of product times,
``[(e, 0), (e + 1, 0))``. Later epochs look their history up there. Compacting
it advances epochs but never merges iterations: ``advance((e', j), {(e, 0)}) =
(e, j)``, so the history of a key is bounded by the iterations at which it ever
changed, not by the number of epochs.

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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.failpoints import failpoint
from dd_etl.lattice import Antichain
from dd_etl.operators import linear
from dd_etl.operators.iterative import ITER, loop_join, loop_reduce
from dd_etl.operators.reduce import null_safe_join
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import PlanError
from dd_etl.plan.iteration import body_of, inner_traces
from dd_etl.runtime.linear_rules import apply_linear
from dd_etl.runtime.reducers import reducer_for
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.delta_trace import DeltaTrace

if TYPE_CHECKING:
    from dd_etl.runtime.runner import Runtime


PINNED_HISTORY_RECORDS = 1_000_000
"""Traces up to this size are held in memory for an epoch of a loop rather than
read from their files in every round."""


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
    """What one round of a loop did: the updates at ``(epoch, iteration)`` across
    the variable, the arrangements and the reductions of its body."""

    loop: str
    epoch: int
    iteration: int
    updates: int


class LoopRun:
    """One ``Iterate`` node over the epochs of a run."""

    def __init__(
        self,
        runtime: Runtime,
        loop: n.Iterate,
        outer: Callable[[n.Node], DataFrame],
        views: list[str],
    ) -> None:
        assert loop.variable is not None and loop.result is not None
        self.rt = runtime
        self.loop = loop
        self.variable = loop.variable
        self.result = loop.result
        self.outer = outer  # the run's changes of a collection outside the loop
        self.views = views
        self.body = body_of(loop)
        self.inside = {x.id for x in self.body}
        self.traced = inner_traces(loop)
        self.rounds: list[Round] = []

    def run(self, start: int, upper: int) -> DataFrame:
        """The loop's output changes at epochs ``[start, upper)``, its inner traces
        appended up to ``upper``."""
        for node in self.traced:  # maintenance elsewhere may have merged batches
            self.rt.loop_trace(self.loop, node).reload()
        outputs = [self._epoch(e) for e in range(start, upper)]
        return functools.reduce(DataFrame.unionByName, outputs)

    # ----------------------------------------------------------------- epochs

    def _epoch(self, e: int) -> DataFrame:
        st = _EpochState(self, e)
        entering = [st.entering(x) for x in self.loop.inputs]
        quiet = not functools.reduce(
            DataFrame.unionByName, [d.select(F.lit(1).alias("x")) for d in entering]
        ).take(1)
        if not quiet:
            initial = entering[0]
            start = initial.unionByName(linear.negate(initial.withColumn(ITER, F.lit(1))))
            st.stage(self.variable, start)
            i = 0
            while True:
                self._round(st, i)
                counts = st.counts(i)
                self.rounds.append(Round(self.loop.id, e, i, counts.get(i, (0, 0))[0]))
                later = [j for j in counts if j > i]
                if not later:
                    break
                i = min(later)
                if i > self.loop.limit:
                    raise LoopDiverged(self.views, e, self.loop.limit)
        lower, upper = Antichain.of((e, 0)), Antichain.of((e + 1, 0))

        def append(node: n.Node) -> bool:
            updates = st.staged(node).withColumn(TIME, F.lit(e).cast("long"))
            return self.rt.loop_trace(self.loop, node).compare_and_append(updates, lower, upper)

        with ThreadPoolExecutor(max_workers=len(self.traced) or 1) as pool:
            list(pool.map(append, self.traced))  # separate traces: commit side by side
        failpoint("loop.epoch_appended")
        # Everything the result ever emitted this epoch, summed over iterations, is
        # what the variable received (shifted by one) plus its start, which cancels.
        leave = st.staged(self.variable).drop(ITER)
        return linear.consolidate(leave.withColumn(TIME, F.lit(e).cast("long")))

    # ----------------------------------------------------------------- rounds

    def _round(self, st: _EpochState, i: int) -> None:
        emitted: dict[str, DataFrame] = {}

        def changes(node: n.Node) -> DataFrame:
            if node.id in self.inside:
                return emitted[node.id]
            return st.entering(node) if i == 0 else st.nothing(node)

        for node in self.body:
            emitted[node.id] = self._emit(node, st, i, changes)
        fed_back = changes(self.result).withColumn(ITER, F.col(ITER) + 1)
        st.stage(self.variable, fed_back)

    def _emit(
        self, node: n.Node, st: _EpochState, i: int, changes: Callable[[n.Node], DataFrame]
    ) -> DataFrame:
        ins = node.inputs
        if isinstance(node, n.Variable):
            return st.at(node, i)
        done = apply_linear(node, changes)
        if done is not None:
            return done
        if isinstance(node, n.Arrange):
            st.stage(node, changes(ins[0]))
            return st.at(node, i)
        if isinstance(node, n.Join):
            left, right = ins
            return loop_join(
                changes(left),
                changes(right),
                st.before(left, i),
                st.before(right, i),
                node.left_key,
                node.right_key,
                left.columns,
                node.right_columns,
                node.null_safe,
            )
        if isinstance(node, n.Reduce):
            touched = changes(ins[0]).select(*node.key).unionByName(st.due(node, i))
            correction, later = loop_reduce(
                touched,
                st.known(ins[0]),
                st.known(node),
                node.key,
                ins[0].columns,
                node.columns,
                reducer_for(node),
                i,
            )
            st.stage(node, correction)
            st.schedule(node, later, i)
            return st.at(node, i)
        raise PlanError(f"iterate: no loop rule for operator {type(node).__name__}")


class _EpochState:
    """The updates of one epoch of a loop so far, per stateful node of its body,
    checkpointed after every change so no round's plan grows with the rounds
    before it."""

    def __init__(self, run: LoopRun, epoch: int) -> None:
        self.run = run
        self.epoch = epoch
        self._staged: dict[str, DataFrame] = {}
        self._due: dict[str, DataFrame] = {}  # reductions: (key, next iteration)
        self._entering: dict[str, DataFrame] = {}
        self._history: dict[str, DataFrame | None] = {}

    def nothing(self, node: n.Node) -> DataFrame:
        empty = self.run.rt.flow.empty_updates(node.schema)
        return empty.select(*node.columns, F.col(TIME).alias(ITER), DIFF)

    def entering(self, node: n.Node) -> DataFrame:
        """An outer collection's changes at this epoch, entering at iteration 0."""
        if node.id not in self._entering:
            df = self.run.outer(node).where(F.col(TIME) == self.epoch)
            df = df.select(*node.columns, F.lit(0).cast("long").alias(ITER), DIFF)
            self._entering[node.id] = df.localCheckpoint(eager=True)
        return self._entering[node.id]

    def staged(self, node: n.Node) -> DataFrame:
        staged = self._staged.get(_home(node).id)
        return self.nothing(node) if staged is None else staged

    def stage(self, node: n.Node, updates: DataFrame) -> None:
        if _home(node) is not node:
            return  # the variable's own staging already holds these updates
        both = self.staged(node).unionByName(updates.select(*node.columns, ITER, DIFF))
        self._staged[node.id] = linear.consolidate(both).localCheckpoint(eager=True)

    def at(self, node: n.Node, i: int) -> DataFrame:
        return self.staged(node).where(F.col(ITER) == i)

    def due(self, node: n.Reduce, i: int) -> DataFrame:
        due = self._due.get(node.id)
        if due is None:
            return self.nothing(node).select(*node.key)
        return due.where(F.col(ITER) == i).select(*node.key)

    def schedule(self, node: n.Reduce, later: DataFrame, i: int) -> None:
        previous = self._due.get(node.id)
        kept = later if previous is None else previous.where(F.col(ITER) > i).unionByName(later)
        self._due[node.id] = kept.distinct().localCheckpoint(eager=True)

    def history(self, node: n.Node, keys: DataFrame) -> DataFrame:
        """The node's updates of earlier epochs for ``keys``, as ``(data, _time1, _diff)``."""
        pinned = self._pinned(node)
        if pinned is not None:
            return _for_keys(pinned, keys)
        return self._read_history(node, keys)

    def _pinned(self, node: n.Node) -> DataFrame | None:
        """A small trace's whole history, read once per epoch: every round looks keys
        up in it without touching files again. Large traces are read per round, for
        the keys of the round only."""
        if node.id not in self._history:
            trace = self._trace(node)
            small = trace is None or trace.state.records <= PINNED_HISTORY_RECORDS
            history = self._read_history(node, None) if small else None
            self._history[node.id] = None if history is None else history.localCheckpoint(True)
        return self._history[node.id]

    def _trace(self, node: n.Node) -> DeltaTrace | None:
        if node.id in self.run.inside:
            return self.run.rt.loop_trace(self.run.loop, node)
        return None if self.epoch == 0 else self.run.rt.trace(node)

    def _read_history(self, node: n.Node, keys: DataFrame | None) -> DataFrame:
        trace = self._trace(node)
        if trace is None:
            return self.nothing(node)
        if node.id in self.run.inside:
            # Epochs before this one are all alike to it: only iterations matter.
            df = trace.updates(keys).where(F.col(TIME) < self.epoch)
            return linear.consolidate(df.select(*node.columns, ITER, DIFF))
        df = trace.read_at((self.epoch - 1,), keys=keys)
        return df.select(*node.columns, F.lit(0).cast("long").alias(ITER), DIFF)

    def _this_epoch(self, node: n.Node) -> DataFrame:
        if node.id in self.run.inside:
            return self.staged(node)
        return self.entering(node)

    def before(self, node: n.Node, i: int) -> Callable[[DataFrame], DataFrame]:
        """An arrangement's updates processed before round ``i``."""

        def read(keys: DataFrame) -> DataFrame:
            mine = _for_keys(self._this_epoch(node).where(F.col(ITER) < i), keys)
            return self.history(node, keys).unionByName(mine)

        return read

    def known(self, node: n.Node) -> Callable[[DataFrame], DataFrame]:
        """Every update of the node seen so far, at any iteration."""

        def read(keys: DataFrame) -> DataFrame:
            mine = _for_keys(self._this_epoch(node), keys)
            return self.history(node, keys).unionByName(mine)

        return read

    def counts(self, i: int) -> dict[int, tuple[int, int]]:
        """Per iteration from ``i`` on: the updates staged anywhere, and those plus
        the keys reductions scheduled (the work left). One Spark job."""
        parts = [
            self.staged(x).select(ITER, F.lit(1).alias("__work"))
            for x in [self.run.variable, *self.run.traced]
        ]
        parts += [
            d.where(F.col(ITER) > i).select(ITER, F.lit(0).alias("__work"))
            for d in self._due.values()
        ]
        if i == 0:
            parts += [d.select(ITER, F.lit(1).alias("__work")) for d in self._entering.values()]
        union = functools.reduce(DataFrame.unionByName, parts).where(F.col(ITER) >= i)
        rows = union.groupBy(ITER).agg(F.sum("__work").alias("updates"), F.count("*").alias("n"))
        return {int(r[ITER]): (int(r["updates"]), int(r["n"])) for r in rows.collect()}


def _for_keys(df: DataFrame, keys: DataFrame) -> DataFrame:
    key = list(keys.columns)
    return null_safe_join(df, keys.distinct(), key, "left_semi") if key else df


def _home(node: n.Node) -> n.Node:
    """The node whose staging holds ``node``'s updates. An arrangement of the loop
    variable holds exactly the variable's updates, round for round: it shares
    them instead of copying them every round."""
    if isinstance(node, n.Arrange) and isinstance(node.inputs[0], n.Variable):
        return node.inputs[0]
    return node
