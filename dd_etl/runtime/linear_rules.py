"""The linear operators of a plan, applied to whatever their inputs are: the
changes of a run, a loop round's updates, or whole collections recomputed from
scratch. Linear operators commute with all of those, so one rule serves each."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from dd_etl.operators import linear
from dd_etl.plan import nodes as n


def apply_linear(node: n.Node, input_of: Callable[[n.Node], DataFrame]) -> DataFrame | None:
    """``node`` applied to its inputs, or ``None`` if it is not a linear operator."""
    ins = node.inputs
    if isinstance(node, n.Select):
        return linear.select(input_of(ins[0]), node.exprs, dict(node.named))
    if isinstance(node, n.Filter):
        return linear.filter_(input_of(ins[0]), node.predicate)
    if isinstance(node, n.Explode):
        keep = [c for c in ins[0].columns if c not in node.names]
        return linear.explode(input_of(ins[0]), node.generator, node.names, keep)
    if isinstance(node, n.Concat):
        return linear.concat([input_of(i) for i in ins])
    if isinstance(node, n.Negate):
        return linear.negate(input_of(ins[0]))
    if isinstance(node, n.Consolidate):
        return linear.consolidate(input_of(ins[0]))
    return None
