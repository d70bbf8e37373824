"""Fixed rows: all of them change at epoch 0, and never again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule
from dd_etl.trace.columns import TIME

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, ScratchScope


class ConstantRule(Rule[n.Constant]):
    def changes(self, node: n.Constant, interval: IntervalScope, start: int) -> DataFrame:
        flow = interval.traces.flow
        return (
            flow.empty_updates(node.schema) if interval.lower > 0 else flow.constant_updates(node)
        )

    def unchanged(self, node: n.Constant, interval: IntervalScope) -> bool:
        return interval.lower > 0

    def from_scratch(self, node: n.Constant, scratch: ScratchScope) -> DataFrame:
        return scratch.flow.constant_updates(node).drop(TIME)


RULE = ConstantRule()
