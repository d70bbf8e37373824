"""The per-group function of each kind of reduction node."""

from __future__ import annotations

from typing import Never, NoReturn

from dd_etl.errors import PlanError
from dd_etl.operators.accumulate import accumulation
from dd_etl.operators.reduce import (
    Reducer,
    aggregation,
    collapse,
    counter,
    distinct,
    extreme,
    min_max,
    pandas_reduce,
    threshold,
    top_k,
)
from dd_etl.operators.window import window
from dd_etl.plan import nodes as n


def reducer_for(node: n.Reduce) -> Reducer:
    """Dispatched on every kind there is (mypy checks the match is exhaustive), so
    an unknown kind is an error, never some other reduction."""
    match node.kind:
        case "distinct":
            return distinct
        case "count":
            return counter(node.column)
        case "min" | "max":
            return extreme(node.kind, node.column)
        case "min_max":
            return min_max
        case "top_k":
            return top_k(node.order, node.limit, node.numbering)
        case "threshold":
            return threshold(node.multiplicity)
        case "collapse":
            return collapse
        case "accumulate":
            return accumulation(node.values)
        case "window" | "running":
            return window(node.calls)
        case "aggregate":
            return aggregation(node.calls)
        case "general":
            if node.function is None:
                raise PlanError(f"reduction {node.id}: a general reduction without a function")
            return pandas_reduce(node.function, node.schema)
        case _:
            _unknown(node.kind, node)


def _unknown(kind: Never, node: n.Reduce) -> NoReturn:
    raise PlanError(f"reduction {node.id}: unknown kind {kind!r}")
