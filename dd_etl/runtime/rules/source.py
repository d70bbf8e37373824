"""A source: its changes are appended by whoever feeds it (an ingest), never
computed by a run; from scratch, its trace is read as of the epoch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from dd_etl.plan import nodes as n
from dd_etl.runtime.rules.rule import Rule

if TYPE_CHECKING:
    from dd_etl.runtime.rules.scopes import IntervalScope, ScratchScope


class SourceRule(Rule[n.Source]):
    def changes(self, node: n.Source, interval: IntervalScope, start: int) -> None:
        return None

    def unchanged(self, node: n.Source, interval: IntervalScope) -> bool:
        return False  # its log tells, not its inputs: it has none

    def from_scratch(self, node: n.Source, scratch: ScratchScope) -> DataFrame:
        return scratch.read(node)


RULE = SourceRule()
