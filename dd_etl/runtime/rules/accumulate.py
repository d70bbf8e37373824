"""In-place sums per key (``operators/accumulate.py``): the changes continue
from the sums the trace holds; from scratch, the sums of the whole input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.accumulate import ROWS, contributions, delta_accumulate
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import keyed_leaves
from dd_etl.runtime.rules.rule import Rule
from dd_etl.trace.columns import DIFF, TIME

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, ScratchScope


class AccumulateRule(Rule[n.Accumulate]):
    def changes(self, node: n.Accumulate, interval: IntervalScope, start: int) -> DataFrame:
        # Continue from the sums the trace holds, not from the run's lower: adding
        # earlier epochs again, in another order, can change a float sum's last
        # bits, and the retraction of the stored row would then not match it. The
        # sums are read for the keys the input's changes touch, by their hashes.
        probes = keyed_leaves(node.inputs[0], node.key) or []
        return delta_accumulate(
            interval.delta_from(node.inputs[0], start),
            interval.history(node, start, probes=probes),
            node.key,
            node.values,
            one_time=interval.upper - start == 1,
        )

    def from_scratch(self, node: n.Accumulate, scratch: ScratchScope) -> DataFrame:
        updates = scratch.evaluate(node.inputs[0]).withColumn(TIME, F.lit(0).cast("long"))
        state = contributions(updates, node.key, node.values).drop(TIME)
        return state.where(F.col(ROWS) > 0).withColumn(DIFF, F.lit(1).cast("long"))


RULE = AccumulateRule()
