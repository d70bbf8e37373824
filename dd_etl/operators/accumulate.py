"""In-place accumulation of sums per key: SQL COUNT, SUM and AVG.

The state of a key is ``(rows, nn_c, sum_c)`` for every value column ``c``: the
number of rows, of non-NULL values, and their sum. It is additive, so changes
update it without reading the input's history: the new state at each time a key
changes is the state before the interval plus the running sum of its changes.
The three counts tell SQL's cases apart: no rows (no group), rows but no
non-NULL value (SUM and AVG are NULL), and values.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType

from dd_etl.operators.join import History
from dd_etl.operators.reduce import AT, Reducer, null_safe_join
from dd_etl.trace.columns import DIFF, TIME

ROWS = "__rows"


def nn(column: str) -> str:
    return f"__nn_{column}"


def total(column: str) -> str:
    return f"__sum_{column}"


def state_columns(values: Sequence[str]) -> list[str]:
    return [ROWS, *[c for v in values for c in (nn(v), total(v))]]


def contributions(d_in: DataFrame, key: Sequence[str], values: Sequence[str]) -> DataFrame:
    """What the changes at each time add to each key's state. Only numbers have a
    sum; other columns can only be counted, and their sum stays NULL."""
    diff = F.col(DIFF)
    parts: list[Column] = [F.sum(diff).alias(ROWS)]
    for v in values:
        present = F.when(F.col(v).isNotNull(), diff).otherwise(F.lit(0))
        numeric = isinstance(d_in.schema[v].dataType, NumericType)
        added = F.sum(F.col(v) * diff) if numeric else F.lit(None).cast("long")
        parts += [F.sum(present).alias(nn(v)), added.alias(total(v))]
    return d_in.groupBy(*key, TIME).agg(*parts)


def accumulation(values: Sequence[str]) -> Reducer:
    """The accumulation recomputed per key from its accumulated input, as a
    reduction: how a loop keeps COUNT/SUM, whose times are only partially ordered,
    so no running sum in time order exists."""

    def accumulate(acc: DataFrame, key: Sequence[str]) -> DataFrame:
        at = contributions(acc.withColumnRenamed(AT, TIME), key, values)
        return at.withColumnRenamed(TIME, AT).withColumn(DIFF, F.lit(1).cast("long"))

    return accumulate


def delta_accumulate(
    d_in: DataFrame,
    output_history: History,
    key: Sequence[str],
    values: Sequence[str],
) -> DataFrame:
    state = state_columns(values)
    changes = contributions(d_in, key, values)
    keys = changes.select(*key).distinct()
    before = output_history(keys).drop(DIFF)
    base = null_safe_join(
        changes, before.select(*key, *[F.col(c).alias(f"__b{c}") for c in state]), key, "left"
    )
    running = Window.partitionBy(*key).orderBy(TIME).rowsBetween(Window.unboundedPreceding, 0)
    order = Window.partitionBy(*key).orderBy(TIME)
    now = base.select(
        *key,
        TIME,
        *[_add(F.sum(c).over(running), F.col(f"__b{c}")).alias(c) for c in state],
        *[F.col(f"__b{c}") for c in state],
        (F.row_number().over(order) == 1).alias("__first"),
    )
    previous = [
        F.when(F.col("__first"), F.col(f"__b{c}")).otherwise(F.lag(c).over(order)).alias(f"__p{c}")
        for c in state
    ]
    steps = now.select(*key, TIME, *state, *previous)
    plus = steps.where(F.col(ROWS) > 0).select(
        *key, *state, TIME, F.lit(1).cast("long").alias(DIFF)
    )
    minus = steps.where(F.col(f"__p{ROWS}") > 0).select(
        *key,
        *[F.col(f"__p{c}").alias(c) for c in state],
        TIME,
        F.lit(-1).cast("long").alias(DIFF),
    )
    return plus.unionByName(minus)


def _add(running: Column, before: Column) -> Column:
    """``running + before`` where a key with no earlier state starts from zero.

    A sum over only NULL values is NULL; it stays NULL until a value arrives.
    """
    return (
        F.when(before.isNull(), running).when(running.isNull(), before).otherwise(running + before)
    )
