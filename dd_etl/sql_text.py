"""DataFrame operations from SQL text.

Operators build their plans from SQL expressions, not PySpark's column API: on a
classic session each column object is several round trips to the JVM, and a
small epoch of the 22 TPC-H views made about 170,000 of them, most of its
planning time; a list of expressions as text crosses at a fixed cost
(``spark_driver``). Names go through ``quote`` (``sql_syntax``, with ``cast``;
both re-exported here).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, SparkSession

from dd_etl.spark_driver import driver_for
from dd_etl.sql_syntax import cast as cast
from dd_etl.sql_syntax import quote as quote


def expr(spark: SparkSession, text: str) -> Column:
    """``F.expr(text)``."""
    return driver_for(spark).expr(text)


def select(df: DataFrame, exprs: Sequence[str]) -> DataFrame:
    """``df.selectExpr(*exprs)``."""
    return driver_for(df.sparkSession).select(df, exprs)


def rows_where(alternatives: Sequence[tuple[str, Sequence[str]]], names: Sequence[str]) -> str:
    """A select item making of each input row one row per alternative
    ``(condition, expressions)`` whose condition holds, as columns ``names``: the
    rows two selects of one input would make, where their union would compute
    that input twice (Spark reuses no common subplan without an exchange)."""
    structs = []
    for condition, exprs in alternatives:
        fields = ", ".join(f"{e} AS __f{i}" for i, e in enumerate(exprs))
        structs.append(f"IF({condition}, struct({fields}), NULL)")
    rows = f"filter(array({', '.join(structs)}), __row -> __row IS NOT NULL)"
    return f"inline({rows}) AS ({', '.join(map(quote, names))})"


def columns(df: DataFrame, names: Sequence[str]) -> DataFrame:
    """``df.select(*names)``: columns by name."""
    return select(df, [quote(c) for c in names])


def group(df: DataFrame, keys: Sequence[str], aggregates: Sequence[str]) -> DataFrame:
    """``GROUP BY keys`` (column names) computing ``aggregates`` (SQL text with
    aliases): the key columns, then the aggregates."""
    return driver_for(df.sparkSession).group(df, keys, aggregates)
