"""Consolidation: the updates of equal data summed into one, and those that sum to
zero dropped, for a trace's reads and its stored layout: as SQL text, a fixed
number of JVM calls however wide the rows (``operators.linear.consolidate`` is
the operators' own, for narrow frames)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from dd_etl import sql_text
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF


def consolidated(df: DataFrame, data: Sequence[str] | None = None) -> DataFrame:
    """``df``'s ``_diff`` summed per distinct ``data`` (default: every other column),
    zeros dropped: the data columns, then ``_diff``."""
    group = [c for c in df.columns if c != DIFF] if data is None else list(data)
    summed = sql_text.group(df, group, [f"sum({quote(DIFF)}) AS {quote(DIFF)}"])
    return summed.where(f"{quote(DIFF)} != 0")
