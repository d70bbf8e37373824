"""The linear operators (select, filter, explode, union, negation,
consolidation): they commute with change, with a loop's rounds and with whole
collections, so one function of their inputs serves each setting."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.operators import linear
from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import N, Rule
from dd_etl.trace.columns import DIFF, TIME

if TYPE_CHECKING:
    import pyarrow as pa

    from dd_etl.runtime.rules.scopes import IntervalScope, RoundScope, ScratchScope

Inputs = Callable[[n.Node], DataFrame]
"""An input's updates, whatever the setting calls updates."""


class Linear(Rule[N]):
    def __init__(self, apply: Callable[[N, Inputs], DataFrame]) -> None:
        self.apply = apply

    def changes(self, node: N, interval: IntervalScope, start: int) -> DataFrame:
        return self.apply(node, interval.delta)

    def in_loop(self, node: N, round: RoundScope) -> DataFrame | None:
        if not any(round.live(i) for i in node.inputs):
            return None  # nothing in, nothing out
        return self.apply(node, round.changes)

    def from_scratch(self, node: N, scratch: ScratchScope) -> DataFrame:
        return self.apply(node, scratch.evaluate)


def _select(node: n.Select, inputs: Inputs) -> DataFrame:
    return linear.select(inputs(node.inputs[0]), node.exprs, dict(node.named))


def _filter(node: n.Filter, inputs: Inputs) -> DataFrame:
    return linear.filter_(inputs(node.inputs[0]), node.predicate)


def _explode(node: n.Explode, inputs: Inputs) -> DataFrame:
    keep = [c for c in node.inputs[0].columns if c not in node.names]
    return linear.explode(inputs(node.inputs[0]), node.generator, node.names, keep)


def _concat(node: n.Concat, inputs: Inputs) -> DataFrame:
    return linear.concat([inputs(i) for i in node.inputs])


def _negate(node: n.Negate, inputs: Inputs) -> DataFrame:
    return linear.negate(inputs(node.inputs[0]))


def _consolidate(node: n.Consolidate, inputs: Inputs) -> DataFrame:
    return linear.consolidate(inputs(node.inputs[0]))


class Select(Linear[n.Select]):
    """A select of plain column references also renames the driver's rows of a
    loop round, so what it feeds back needs no Spark job to be counted."""

    def __init__(self) -> None:
        super().__init__(_select)

    def rows_in_loop(self, node: n.Select, round: RoundScope) -> pa.Table | None:
        given = round.rows(node.inputs[0])
        return None if given is None else _projected(node, given)


SELECT = Select()
FILTER = Linear(_filter)
EXPLODE = Linear(_explode)
CONCAT = Linear(_concat)
NEGATE = Linear(_negate)
CONSOLIDATE = Linear(_consolidate)

_COLUMN = re.compile(r"`?([A-Za-z_][A-Za-z0-9_]*)`?")


def _projected(node: n.Select, rows: pa.Table) -> pa.Table | None:
    """A select of column references, renamed or not, applied to the driver's rows;
    None for one that computes anything."""
    outputs = [*((e, None) for e in node.exprs), *((e, name) for name, e in node.named)]
    picked, names = [], []
    for expr, name in outputs:
        found = _COLUMN.fullmatch(expr) if isinstance(expr, str) else None
        if found is None or found.group(1) not in rows.column_names:
            return None
        picked.append(found.group(1))
        names.append(name or found.group(1))
    book = [c for c in rows.column_names if c == DIFF or c.startswith(TIME)]
    return rows.select([*picked, *book]).rename_columns([*names, *book])
