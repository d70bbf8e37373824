"""Evaluate a view from scratch: the sources accumulated at one epoch, then every
operator as a plain Spark batch query over multiplicities.

This is what incremental maintenance must equal (invariant 6 of ARCHITECTURE.md): the
baseline benchmarks compare against, and what a verification recomputes. It
shares the per-group reduction functions with the incremental path but none of
its delta logic: no traces of intermediate results, no interesting times. Each
node is computed by its kind's rule (``runtime/rules``, ``from_scratch``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.operators import linear
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import Dataflow, PlanError
from dd_etl.plan.loops import loop_nest
from dd_etl.runtime.iteration import LoopDiverged
from dd_etl.runtime.rules import rule_for
from dd_etl.trace.placement import BULK, Placement

if TYPE_CHECKING:
    from dd_etl.runtime.catalog import TraceCatalog


def recompute(
    traces: TraceCatalog,
    view: str,
    at: int,
    read_views: bool = False,
    placement: Placement = BULK,
) -> DataFrame:
    """The view at epoch ``at`` as distinct rows with their multiplicity ``_diff``.

    ``read_views``: the views it reads are read from their traces (up to date
    and trusted) instead of being recomputed too; the traces are read as
    ``placement`` says."""
    if view not in traces.flow.views:
        raise PlanError(f"unknown view {view!r}; views are {sorted(traces.flow.views)}")
    scratch = _Scratch(traces, view, at, read_views, placement)
    return linear.consolidate(scratch.evaluate(traces.flow.views[view]))


class _Scratch:
    """One view's evaluation at epoch ``at``: each node's collection computed once."""

    def __init__(
        self, traces: TraceCatalog, view: str, at: int, read_views: bool, placement: Placement
    ) -> None:
        self.traces = traces
        self.view = view
        self.at = at
        self.read_views = read_views
        self.placement = placement
        self.memo: dict[str, DataFrame] = {}

    @property
    def flow(self) -> Dataflow:
        return self.traces.flow

    def evaluate(self, node: n.Node) -> DataFrame:
        if node.id not in self.memo:
            self.memo[node.id] = rule_for(node).from_scratch(node, self)
        return self.memo[node.id]

    def reads_trace(self, node: n.View) -> bool:
        return self.read_views and node.name != self.view

    def read(self, node: n.Node) -> DataFrame:
        trace = self.traces.trace(node)
        trace.reload()  # maintenance elsewhere may have merged (and vacuumed) batches
        return trace.read_at((self.at,), placement=self.placement)

    def fixed_point(self, loop: n.Iterate) -> DataFrame:
        inner = list(loop_nest(loop))  # nested loops' bodies are recomputed too
        x = linear.consolidate(self.evaluate(loop.inputs[0])).localCheckpoint(eager=True)
        for _ in range(loop.limit):
            for i in inner:
                self.memo.pop(i, None)
            self.memo[loop.variable.id] = x
            after = linear.consolidate(self.evaluate(loop.result)).localCheckpoint(eager=True)
            if linear.consolidate(after.unionByName(linear.negate(x))).isEmpty():
                return x
            x = after
        raise LoopDiverged([self.view], self.at, loop.limit)
