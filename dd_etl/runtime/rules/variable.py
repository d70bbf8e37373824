"""A loop's variable: inside the loop, the updates staged for it at each round
(the initial collection at iteration 0, the body's result fed back after)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.errors import PlanError
from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule

if TYPE_CHECKING:
    import pyarrow as pa

    from dd_etl.runtime.rules.scopes import RoundScope, ScratchScope


class VariableRule(Rule[n.Variable]):
    def in_loop(self, node: n.Variable, round: RoundScope) -> DataFrame | None:
        return round.at(node) if round.staged(node) else None

    def rows_in_loop(self, node: n.Variable, round: RoundScope) -> pa.Table | None:
        return round.rows_at(node)

    def from_scratch(self, node: n.Variable, scratch: ScratchScope) -> DataFrame:
        raise PlanError("a loop variable can only be read inside its loop's body")


RULE = VariableRule()
