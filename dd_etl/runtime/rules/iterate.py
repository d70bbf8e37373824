"""A loop: as a change, run epoch by epoch to its fixed point (``LoopRun``);
nested in another, run inside each round of it; from scratch, its body applied
to whole collections until they stop changing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, RoundScope, ScratchScope


class IterateRule(Rule[n.Iterate]):
    def changes(self, node: n.Iterate, interval: IntervalScope, start: int) -> DataFrame:
        return interval.run_loop(node, start)

    def unchanged(self, node: n.Iterate, interval: IntervalScope) -> bool:
        return False  # a loop is always run: its inner traces are appended every epoch

    def in_loop(self, node: n.Iterate, round: RoundScope) -> DataFrame | None:
        busy = any(round.live(i) for i in node.inputs) or round.busy(node)
        return round.nested(node) if busy else None

    def from_scratch(self, node: n.Iterate, scratch: ScratchScope) -> DataFrame:
        return scratch.fixed_point(node)


RULE = IterateRule()
