"""A view: its definition's changes, kept as a trace for readers and sinks.
Recomputed from scratch, a view another view reads may be read from its trace
instead (up to date and trusted)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, ScratchScope


class ViewRule(Rule[n.View]):
    def changes(self, node: n.View, interval: IntervalScope, start: int) -> DataFrame:
        return interval.delta(node.inputs[0])

    def from_scratch(self, node: n.View, scratch: ScratchScope) -> DataFrame:
        if scratch.reads_trace(node):
            return scratch.read(node)
        return scratch.evaluate(node.inputs[0])


RULE = ViewRule()
