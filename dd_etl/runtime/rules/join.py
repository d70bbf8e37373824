"""An equi-join of two arrangements: each side's changes against the other's
history, plus the changes against each other (``operators/join.py``); in a
loop, each side's round against the other's updates before it
(``operators/iterative.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.iterative import loop_join
from dd_etl.operators.join import delta_join
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import keyed_leaves
from dd_etl.runtime.rules.rule import Rule
from dd_etl.trace.columns import DIFF

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, RoundScope, ScratchScope


class JoinRule(Rule[n.Join]):
    def changes(self, node: n.Join, interval: IntervalScope, start: int) -> DataFrame:
        left, right = node.inputs
        # each side's history read for the keys the other side's changes touch
        lefts, rights = keyed_leaves(left, node.left_key), keyed_leaves(right, node.right_key)
        if lefts is None or rights is None:
            lefts = rights = []
        return delta_join(
            interval.delta(left),
            interval.delta(right),
            interval.history(left, probes=rights),
            interval.history(right, probes=lefts),
            node.left_key,
            node.right_key,
            left.columns,
            node.right_columns,
            node.null_safe,
        )

    def in_loop(self, node: n.Join, round: RoundScope) -> DataFrame | None:
        left, right = node.inputs
        if not (round.live(left) or round.live(right)):
            return None
        return loop_join(
            round.changes(left),
            round.changes(right),
            round.before(left),
            round.before(right),
            node.left_key,
            node.right_key,
            left.columns,
            node.right_columns,
            node.null_safe,
            len(round.t),
        )

    def from_scratch(self, node: n.Join, scratch: ScratchScope) -> DataFrame:
        left_node, right_node = node.inputs
        left = scratch.evaluate(left_node).alias("l")
        right = scratch.evaluate(right_node).alias("r")
        pairs = zip(node.left_key, node.right_key, strict=True)
        if node.null_safe:
            cond = [F.col(f"l.{a}").eqNullSafe(F.col(f"r.{b}")) for a, b in pairs]
        else:
            cond = [F.col(f"l.{a}") == F.col(f"r.{b}") for a, b in pairs]
        return left.join(right, cond).select(
            *[F.col(f"l.{c}").alias(c) for c in left_node.columns],
            *[F.col(f"r.{c}").alias(c) for c in node.right_columns],
            (F.col(f"l.{DIFF}") * F.col(f"r.{DIFF}")).alias(DIFF),
        )


RULE = JoinRule()
