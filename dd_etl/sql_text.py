"""DataFrame operations from SQL text, at a fixed number of JVM calls each.

Every PySpark call is a round trip to the JVM, and the column API pays several
per column: one for each ``F.col``, ``alias`` and ``cast``, one for each list
element handed over, and one more when Python drops each object it created.
A small epoch of the 22 TPC-H views made about 170,000 such calls, and they
were most of its planning time. Here a list of SQL
expressions crosses as one string, split into a Java array in the JVM, so an
operation costs a fixed few calls however many columns it has (a select 2,
a group-by 4).

Expressions are Spark SQL text; names go through ``quote``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

_SEPARATOR = "\x1f"
"""Joins a list's items into one string; an item holding it goes the slow way."""


def quote(name: str) -> str:
    """A column name as SQL text."""
    return "`" + name.replace("`", "``") + "`"


def cast(expr: str, kind: DataType) -> str:
    return f"CAST({expr} AS {type_text(kind)})"


def type_text(kind: DataType) -> str:
    """A type as SQL text; nested field names are quoted (``simpleString`` does not)."""
    if isinstance(kind, StructType):
        fields = ", ".join(f"{quote(f.name)}: {type_text(f.dataType)}" for f in kind.fields)
        return f"STRUCT<{fields}>"
    if isinstance(kind, ArrayType):
        return f"ARRAY<{type_text(kind.elementType)}>"
    if isinstance(kind, MapType):
        return f"MAP<{type_text(kind.keyType)}, {type_text(kind.valueType)}>"
    return kind.simpleString()


def expr(spark: SparkSession, text: str) -> Column:
    """``F.expr(text)``."""
    return Column(_expr(spark)(text))


def select(df: DataFrame, exprs: Sequence[str]) -> DataFrame:
    """``df.selectExpr(*exprs)``."""
    strings = _strings(df.sparkSession, exprs)
    if strings is None:
        return df.selectExpr(*exprs)
    return DataFrame(df._jdf.selectExpr(strings), df.sparkSession)


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
    spark = df.sparkSession
    strings = _strings(spark, [quote(k) for k in keys[1:]])
    if not keys or not aggregates or strings is None:
        return df.groupBy(*keys).agg(*[F.expr(a) for a in aggregates])
    first, *rest = aggregates
    grouped = df._jdf.groupBy(quote(keys[0]), strings)
    return DataFrame(grouped.agg(_expr(spark)(first), _columns(spark, rest)), spark)


def _strings(spark: SparkSession, items: Sequence[str]) -> Any | None:
    """``items`` as a Java ``String[]``, or None if one holds the separator."""
    if any(_SEPARATOR in item for item in items):
        return None
    if not items:
        return _empty_strings(spark)
    return _split(spark)(_SEPARATOR.join(items), _SEPARATOR)


def _columns(spark: SparkSession, exprs: Sequence[str]) -> Any:
    """SQL expressions as a Java ``Column[]``."""
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    if not exprs:
        return _empty_columns(spark._jvm, gateway)
    array = gateway.new_array(jvm_member(spark._jvm, "org.apache.spark.sql.Column"), len(exprs))
    for i, e in enumerate(exprs):
        array[i] = _expr(spark)(e)
    return array


# JVM classes, methods and constants, looked up once per JVM: each lookup is a round trip.


@lru_cache(maxsize=64)
def jvm_member(jvm: Any, name: str) -> Any:
    """A JVM class, static method or constant by its full name, looked up once."""
    found = jvm
    for part in name.split("."):
        found = getattr(found, part)
    return found


def _split(spark: SparkSession) -> Any:
    return jvm_member(
        spark._jvm, "org.apache.commons.lang3.StringUtils.splitByWholeSeparatorPreserveAllTokens"
    )


def _expr(spark: SparkSession) -> Any:
    return jvm_member(spark._jvm, "org.apache.spark.sql.functions.expr")


def _empty_strings(spark: SparkSession) -> Any:
    return jvm_member(spark._jvm, "org.apache.commons.lang3.ArrayUtils.EMPTY_STRING_ARRAY")


@lru_cache(maxsize=16)
def _empty_columns(jvm: Any, gateway: Any) -> Any:
    return gateway.new_array(jvm_member(jvm, "org.apache.spark.sql.Column"), 0)
