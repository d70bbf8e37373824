"""Reductions per key, recomputed only for the keys a change touches.

For a touched key with interesting times ``e1 < e2 < … < em`` in the interval
(the times of its input changes; epochs are totally ordered), the output
changes are ``f(In≤e_i) - f(In≤e_{i-1})`` at ``e_i``, with ``f(In≤e_0)`` the
output the key had before the interval (read from the reduction's own trace).
The differences telescope, so the output accumulated at any ``e`` is
``f(In≤e)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.operators.join import History
from dd_etl.operators.partitions import colocated
from dd_etl.trace.columns import DIFF, TIME

AT = "__at"
NEXT = "__next"
LOW = "__min"
HIGH = "__max"

Reducer = Callable[[DataFrame, Sequence[str]], DataFrame]
"""``f``: accumulated input (key, data, ``__at``, positive ``_diff``) to output
rows (output columns, ``__at``, ``_diff``) grouped by key and ``__at``."""


def distinct(acc: DataFrame, key: Sequence[str]) -> DataFrame:
    return acc.select(*key, AT, F.lit(1).cast("long").alias(DIFF))


def counter(name: str) -> Reducer:
    def count(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        return (
            acc.groupBy(*key, AT)
            .agg(F.sum(DIFF).alias(name))
            .withColumn(DIFF, F.lit(1).cast("long"))
        )

    return count


def extreme(kind: str, value: str) -> Reducer:
    """MIN or MAX of ``value`` per key (one level of a hierarchical reduction)."""
    agg = F.min if kind == "min" else F.max

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        return (
            acc.groupBy(*key, AT)
            .agg(agg(value).alias(value))
            .withColumn(DIFF, F.lit(1).cast("long"))
        )

    return reduce


def min_max(acc: DataFrame, key: Sequence[str]) -> DataFrame:
    """The least ``__min`` and the greatest ``__max`` per key: MIN and MAX carried
    up one hierarchy of reductions together."""
    return (
        acc.groupBy(*key, AT)
        .agg(F.min(LOW).alias(LOW), F.max(HIGH).alias(HIGH))
        .withColumn(DIFF, F.lit(1).cast("long"))
    )


def collapse(acc: DataFrame, key: Sequence[str]) -> DataFrame:
    """Per key, each column's largest value: for rows that each fill in different
    columns of one key (NULL elsewhere), the one row holding all of them."""
    data = [c for c in acc.columns if c not in (*key, AT, DIFF)]
    return (
        acc.groupBy(*key, AT)
        .agg(*(F.max(c).alias(c) for c in data))
        .withColumn(DIFF, F.lit(1).cast("long"))
    )


def top_k(order: Sequence[tuple[str, bool]], k: int) -> Reducer:
    """The first ``k`` rows per key by ``order`` (SQL ORDER BY … LIMIT per group),
    counting each row as often as its multiplicity; ties broken by the whole row
    so the result is deterministic."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        data = [c for c in acc.columns if c not in (AT, DIFF)]
        copies = acc.select(*data, AT, F.explode(F.sequence(F.lit(1), F.col(DIFF))).alias("__copy"))
        ordering = [F.col(c).desc() if desc else F.col(c).asc() for c, desc in order]
        window = Window.partitionBy(*key, AT).orderBy(*ordering, *data)
        kept = copies.withColumn("__rank", F.row_number().over(window)).where(F.col("__rank") <= k)
        return kept.groupBy(*data, AT).agg(F.count(F.lit(1)).alias(DIFF))

    return reduce


def threshold(multiplicity: str) -> Reducer:
    """Each distinct row with its multiplicity mapped through a SQL expression of ``_diff``."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        data = [c for c in acc.columns if c not in (AT, DIFF)]
        mapped = acc.select(*data, AT, F.expr(multiplicity).cast("long").alias(DIFF))
        return mapped.where(F.col(DIFF) != 0)

    return reduce


def pandas_reduce(function: Callable[[Any], Any], schema: StructType) -> Reducer:
    """A general reduction in Python, vectorised: ``function`` gets one key's rows as
    a pandas DataFrame (data columns and ``_diff``, the multiplicity) and returns
    the key's output rows, optionally with their own ``_diff``."""

    def reduce(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        out = StructType(
            [*schema.fields, StructField(AT, LongType()), StructField(DIFF, LongType())]
        )

        def apply(group: Any) -> Any:
            at = int(group[AT].iloc[0])
            rows = function(group.drop(columns=[AT]).reset_index(drop=True))
            rows = rows.copy()
            if DIFF not in rows.columns:
                rows[DIFF] = 1
            rows[AT] = at
            return rows[[*schema.fieldNames(), AT, DIFF]]

        return acc.groupBy(*key, AT).applyInPandas(apply, out)

    return reduce


def null_safe_join(
    left: DataFrame, right: DataFrame, key: Sequence[str], how: str = "inner"
) -> DataFrame:
    """Join on ``key`` treating NULL as a value: grouping keys, unlike join keys, may be NULL."""
    r = right.select(
        *[F.col(k).alias(f"__r_{k}") for k in key], *[c for c in right.columns if c not in key]
    )
    left, r = colocated(left, r)
    cond = [left[k].eqNullSafe(r[f"__r_{k}"]) for k in key] or F.lit(True)  # one group: all
    joined = left.join(r, cond, how)
    return joined.drop(*[f"__r_{k}" for k in key])


def delta_reduce(
    d_in: DataFrame,
    input_history: History,
    output_history: History,
    key: Sequence[str],
    out_columns: Sequence[str],
    reducer: Reducer,
    history_time: int,
) -> DataFrame:
    data = [c for c in d_in.columns if c not in (TIME, DIFF)]
    times = d_in.select(*key, F.col(TIME).alias(AT)).distinct()
    keys = times.select(*key).distinct()
    order = Window.partitionBy(*key).orderBy(AT)
    times = times.withColumn(NEXT, F.lead(AT).over(order)).withColumn(
        "__first", F.row_number().over(order) == 1
    )
    hist = input_history(keys).withColumn(TIME, F.lit(history_time).cast("long"))
    updates = hist.select(*data, TIME, DIFF).unionByName(d_in.select(*data, TIME, DIFF))
    acc = (
        null_safe_join(updates, times.select(*key, AT), key)
        .where(F.col(TIME) <= F.col(AT))
        .groupBy(*data, AT)
        .agg(F.sum(DIFF).alias(DIFF))
        .where(F.col(DIFF) > 0)
    )
    out = reducer(acc, key).select(*out_columns, AT, DIFF)
    # +f at each interesting time, -f at the next one
    plus = out.select(*out_columns, F.col(AT).alias(TIME), DIFF)
    shifted = null_safe_join(out, times.select(*key, AT, NEXT), [*key, AT]).where(
        F.col(NEXT).isNotNull()
    )
    minus = shifted.select(*out_columns, F.col(NEXT).alias(TIME), (-F.col(DIFF)).alias(DIFF))
    # -(output before the interval) at each key's first interesting time
    first = times.where("__first").select(*key, F.col(AT).alias(TIME))
    before = null_safe_join(output_history(keys), first, key)
    retract = before.select(*out_columns, TIME, (-F.col(DIFF)).alias(DIFF))
    return plus.unionByName(minus).unionByName(retract)
