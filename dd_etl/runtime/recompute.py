"""Evaluate a view from scratch: the sources accumulated at one epoch, then every
operator as a plain Spark batch query over multiplicities.

This is what incremental maintenance must equal (invariant 6 of ARCHITECTURE.md): the
baseline benchmarks compare against, and what a verification recomputes. It
shares the per-group reduction functions with the incremental path but none of
its delta logic: no traces of intermediate results, no interesting times.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators import linear
from dd_etl.operators.accumulate import ROWS, contributions
from dd_etl.operators.reduce import AT
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import PlanError
from dd_etl.plan.loops import loop_nest
from dd_etl.runtime.iteration import LoopDiverged
from dd_etl.runtime.linear_rules import apply_linear
from dd_etl.runtime.reducers import reducer_for
from dd_etl.trace.columns import DIFF, TIME
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
    memo: dict[str, DataFrame] = {}

    def evaluate(node: n.Node) -> DataFrame:
        if node.id not in memo:
            memo[node.id] = _evaluate(node)
        return memo[node.id]

    def _evaluate(node: n.Node) -> DataFrame:
        ins = node.inputs
        if isinstance(node, n.Source) or (
            read_views and isinstance(node, n.View) and node.name != view
        ):
            trace = traces.trace(node)
            trace.reload()  # maintenance elsewhere may have merged (and vacuumed) batches
            return trace.read_at((at,), placement=placement)
        if isinstance(node, n.Arrange | n.View):
            return evaluate(ins[0])
        if isinstance(node, n.Constant):
            return traces.flow.constant_updates(node).drop(TIME)
        done = apply_linear(node, evaluate)
        if done is not None:
            return done
        if isinstance(node, n.Join):
            left = evaluate(ins[0]).alias("l")
            right = evaluate(ins[1]).alias("r")
            pairs = zip(node.left_key, node.right_key, strict=True)
            if node.null_safe:
                cond = [F.col(f"l.{a}").eqNullSafe(F.col(f"r.{b}")) for a, b in pairs]
            else:
                cond = [F.col(f"l.{a}") == F.col(f"r.{b}") for a, b in pairs]
            return left.join(right, cond).select(
                *[F.col(f"l.{c}").alias(c) for c in ins[0].columns],
                *[F.col(f"r.{c}").alias(c) for c in node.right_columns],
                (F.col(f"l.{DIFF}") * F.col(f"r.{DIFF}")).alias(DIFF),
            )
        if isinstance(node, n.DeltaQuery):
            relations = {lk.relation: i for lk, i in zip(node.lookups, ins, strict=True)}
            out = evaluate(relations[0]).withColumnRenamed(DIFF, "__d0")
            for r in range(1, len(relations)):
                other = evaluate(relations[r]).withColumnRenamed(DIFF, f"__d{r}")
                shared = [c for c in other.columns if c in out.columns]
                cond = [out[c] == other[c] for c in shared]
                out = out.join(other, cond).select(
                    out["*"], *[other[c] for c in other.columns if c not in shared]
                )
            diff = functools.reduce(lambda a, b: a * b, [F.col(f"__d{r}") for r in relations])
            return out.select(*node.columns, diff.alias(DIFF))
        if isinstance(node, n.Reduce):
            acc = (
                linear.consolidate(evaluate(ins[0])).where(F.col(DIFF) > 0).withColumn(AT, F.lit(0))
            )
            return reducer_for(node)(acc, node.key).select(*node.columns, DIFF)
        if isinstance(node, n.Accumulate):
            updates = evaluate(ins[0]).withColumn(TIME, F.lit(0).cast("long"))
            state = contributions(updates, node.key, node.values).drop(TIME)
            return state.where(F.col(ROWS) > 0).withColumn(DIFF, F.lit(1).cast("long"))
        if isinstance(node, n.Iterate):
            return fixed_point(node)
        if isinstance(node, n.Variable):
            raise PlanError("a loop variable can only be read inside its loop's body")
        raise PlanError(f"no batch rule for operator {type(node).__name__}")

    def fixed_point(loop: n.Iterate) -> DataFrame:
        """Apply the body to the whole collection until it stops changing."""
        inner = list(loop_nest(loop))  # nested loops' bodies are recomputed too
        x = linear.consolidate(evaluate(loop.inputs[0])).localCheckpoint(eager=True)
        for _ in range(loop.limit):
            for i in inner:
                memo.pop(i, None)
            memo[loop.variable.id] = x
            after = linear.consolidate(evaluate(loop.result)).localCheckpoint(eager=True)
            if linear.consolidate(after.unionByName(linear.negate(x))).isEmpty():
                return x
            x = after
        raise LoopDiverged([view], at, loop.limit)

    if view not in traces.flow.views:
        raise PlanError(f"unknown view {view!r}; views are {sorted(traces.flow.views)}")
    return linear.consolidate(evaluate(traces.flow.views[view]))
