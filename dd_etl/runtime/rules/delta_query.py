"""A join of several relations as a delta query (``operators/delta_query.py``):
each relation's changes looked up, in its own order, in the others' histories."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.delta_query import delta_query
from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule
from dd_etl.trace.columns import DIFF

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, ScratchScope


class DeltaQueryRule(Rule[n.DeltaQuery]):
    def changes(self, node: n.DeltaQuery, interval: IntervalScope, start: int) -> DataFrame:
        arranged = dict(zip(node.lookups, node.inputs, strict=True))
        relations = range(len(node.orders))
        # a relation's changes, read from any of its arrangements
        first = [next(a for lk, a in arranged.items() if lk.relation == r) for r in relations]
        return delta_query(
            [interval.delta(a) for a in first],
            lambda lk: interval.history(arranged[lk]),
            node.orders,
            node.columns,
        )

    def from_scratch(self, node: n.DeltaQuery, scratch: ScratchScope) -> DataFrame:
        relations = {lk.relation: i for lk, i in zip(node.lookups, node.inputs, strict=True)}
        out = scratch.evaluate(relations[0]).withColumnRenamed(DIFF, "__d0")
        for r in range(1, len(relations)):
            other = scratch.evaluate(relations[r]).withColumnRenamed(DIFF, f"__d{r}")
            shared = [c for c in other.columns if c in out.columns]
            cond = [out[c] == other[c] for c in shared]
            out = out.join(other, cond).select(
                out["*"], *[other[c] for c in other.columns if c not in shared]
            )
        diff = functools.reduce(lambda a, b: a * b, [F.col(f"__d{r}") for r in relations])
        return out.select(*node.columns, diff.alias(DIFF))


RULE = DeltaQueryRule()
