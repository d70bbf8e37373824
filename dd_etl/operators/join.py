"""Delta join of two arrangements.

For the interval ``[lower, upper)`` the new output is

    ΔA ⋈ (B(< lower) + ΔB)  +  A(< lower) ⋈ ΔB

with output time the join (max) of the input times and diff the product of the
input diffs. History is read only for the keys present in the other side's
changes, so the cost follows the size of the change. SQL semantics: NULL keys
never match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl import sql_text
from dd_etl.operators.partitions import join, union
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, TIME

History = Callable[[DataFrame], DataFrame]
"""Given a DataFrame of key columns, the arrangement's accumulated contents
before the interval for those keys: data columns plus ``_diff``."""

HISTORY_TIME = 0
"""The time history rows stand at beside the interval's changes: no change is
before it, so pairing a change with history keeps the change's time, and every
history row is accumulated into every interesting time. A constant, not the
interval's ``lower - 1``: Spark writes literals into the code it generates for a
plan, and a plan without the epoch in it runs on the code generated for the last."""


def matchable_keys(df: DataFrame, key: Sequence[str], null_safe: bool) -> DataFrame:
    """The keys of ``df``'s rows a join can match (without ``null_safe``, not
    NULL), one per row."""
    keys = sql_text.columns(df, key)
    if null_safe or not key:
        return keys
    return keys.where(" AND ".join(f"{quote(k)} IS NOT NULL" for k in key))


def join_keys(df: DataFrame, key: Sequence[str], null_safe: bool) -> DataFrame:
    """Distinct keys of ``df`` a join can match."""
    return matchable_keys(df, key, null_safe).distinct()


def pair(
    left: DataFrame,
    right: DataFrame,
    lk: Sequence[str],
    rk: Sequence[str],
    right_columns: Sequence[str],
    left_columns: Sequence[str],
    null_safe: bool,
    times: Sequence[str] = (TIME,),
) -> DataFrame:
    """Matching pairs, each at the join (coordinate-wise max) of its two times."""
    equal = "<=>" if null_safe else "="
    pairs = zip(lk, rk, strict=True)
    cond = " AND ".join(f"l.{quote(a)} {equal} r.{quote(b)}" for a, b in pairs) or "TRUE"
    joined = join(left, right, cond, aliases=("l", "r"))
    return sql_text.select(
        joined,
        [
            *[f"l.{quote(c)} AS {quote(c)}" for c in left_columns],
            *[f"r.{quote(c)} AS {quote(c)}" for c in right_columns],
            *[f"greatest(l.{quote(t)}, r.{quote(t)}) AS {quote(t)}" for t in times],
            f"l.{quote(DIFF)} * r.{quote(DIFF)} AS {quote(DIFF)}",
        ],
    )


def delta_join(
    d_left: DataFrame,
    d_right: DataFrame,
    left_history: History,
    right_history: History,
    lk: Sequence[str],
    rk: Sequence[str],
    left_columns: Sequence[str],
    right_columns: Sequence[str],
    null_safe: bool = False,
) -> DataFrame:
    hist_time = F.lit(HISTORY_TIME).cast("long")
    h_right = right_history(join_keys(d_left, lk, null_safe).toDF(*rk)).withColumn(TIME, hist_time)
    h_left = left_history(join_keys(d_right, rk, null_safe).toDF(*lk)).withColumn(TIME, hist_time)
    both = h_right.unionByName(d_right)
    first = pair(d_left, both, lk, rk, right_columns, left_columns, null_safe)
    second = pair(h_left, d_right, lk, rk, right_columns, left_columns, null_safe)
    return union(first, second)
