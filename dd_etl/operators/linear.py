"""Linear operators: each output update depends on one input update only, so the
output changes are the operator applied to the input changes, times unchanged."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dd_etl import sql_text
from dd_etl.operators.partitions import union
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, TIME

Expr = Column | str


def col(e: Expr) -> Column:
    """A Spark column from a column expression or a SQL expression string."""
    return e if isinstance(e, Column) else F.expr(e)


_NAME = re.compile(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)")
_LITERALS = frozenset({"true", "false", "null"})


def referenced_column(e: Expr) -> str | None:
    """The column ``e`` only names (``"a"``, ``"`a`"``, ``F.col("a")``), read from
    its text; None for anything computed (or a name this cannot tell from one)."""
    text = str(e)
    if isinstance(e, Column):
        if not (text.startswith("Column<'") and text.endswith("'>")):
            return None
        text = text[len("Column<'") : -2]
    m = _NAME.fullmatch(text)
    if m is None or text.lower() in _LITERALS:
        return None
    return m.group(1) or m.group(2)


def bookkeeping(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c == DIFF or c.startswith(TIME)]


def data_columns(df: DataFrame) -> list[str]:
    book = set(bookkeeping(df))
    return [c for c in df.columns if c not in book]


def select(df: DataFrame, exprs: Sequence[Expr], named: dict[str, Expr]) -> DataFrame:
    texts = [*exprs, *named.values()]
    if all(isinstance(e, str) for e in texts):  # SQL text: a fixed number of JVM calls
        aliased = [f"{e} AS {quote(n)}" for n, e in named.items()]
        book = [quote(c) for c in bookkeeping(df)]
        return sql_text.select(df, [*[str(e) for e in exprs], *aliased, *book])
    cols = [col(e) for e in exprs] + [col(e).alias(n) for n, e in named.items()]
    return df.select(*cols, *bookkeeping(df))


def filter_(df: DataFrame, predicate: Expr) -> DataFrame:
    # SQL semantics: a NULL predicate drops the row, as WHERE does.
    if isinstance(predicate, str):
        return df.where(f"coalesce(({predicate}), FALSE)")
    return df.where(F.coalesce(predicate, F.lit(False)))


def explode(df: DataFrame, generator: Expr, names: Sequence[str], keep: Sequence[str]) -> DataFrame:
    return df.select(*keep, col(generator).alias(*names), *bookkeeping(df))


def concat(dfs: Sequence[DataFrame]) -> DataFrame:
    return union(*dfs)


def negate(df: DataFrame) -> DataFrame:
    return df.withColumn(DIFF, -F.col(DIFF))


def consolidate(df: DataFrame) -> DataFrame:
    """``trace.consolidation.consolidated`` through the column API: loops consolidate
    narrow frames many times per round, where parsing SQL text costs more than the
    round trips it saves (the SCC test took 8 % longer with it)."""
    group = [c for c in df.columns if c != DIFF]
    return df.groupBy(*group).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
