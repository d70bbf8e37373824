"""The per-group function of each kind of reduction node."""

from __future__ import annotations

from dd_etl.operators.accumulate import accumulation
from dd_etl.operators.reduce import (
    Reducer,
    collapse,
    counter,
    distinct,
    extreme,
    pandas_reduce,
    threshold,
    top_k,
)
from dd_etl.plan import nodes as n


def reducer_for(node: n.Reduce) -> Reducer:
    if node.kind == "distinct":
        return distinct
    if node.kind == "count":
        return counter(node.column)
    if node.kind == "top_k":
        return top_k(node.order, node.limit)
    if node.kind == "threshold":
        return threshold(node.multiplicity)
    if node.kind == "collapse":
        return collapse
    if node.kind == "accumulate":
        return accumulation(node.values)
    if node.kind == "general":
        assert node.function is not None
        return pandas_reduce(node.function, node.schema)
    return extreme(node.kind, node.column)
