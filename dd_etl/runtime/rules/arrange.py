"""An arrangement: its input's updates, kept as a trace by key. Inside a loop
it stages each round's updates, which later rounds look keys up in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule

if TYPE_CHECKING:
    import pyarrow as pa

    from dd_etl.runtime.rules.scopes import IntervalScope, RoundScope, ScratchScope


class ArrangeRule(Rule[n.Arrange]):
    def changes(self, node: n.Arrange, interval: IntervalScope, start: int) -> DataFrame:
        return interval.delta(node.inputs[0])

    def in_loop(self, node: n.Arrange, round: RoundScope) -> DataFrame | None:
        given = node.inputs[0]
        if round.live(given):
            round.stage(node, round.changes(given), rows=round.rows(given))
        elif not round.staged(node):
            return None
        return round.at(node)

    def rows_in_loop(self, node: n.Arrange, round: RoundScope) -> pa.Table | None:
        return round.rows_at(node)

    def from_scratch(self, node: n.Arrange, scratch: ScratchScope) -> DataFrame:
        return scratch.evaluate(node.inputs[0])


RULE = ArrangeRule()
