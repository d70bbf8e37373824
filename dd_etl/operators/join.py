"""Delta join of two arrangements.

For the interval ``[lower, upper)`` the new output is

    ΔA ⋈ (B(< lower) + ΔB)  +  A(< lower) ⋈ ΔB

with output time the join (max) of the input times and diff the product of the
input diffs. History is read only for the keys present in the other side's
changes, so the cost follows the size of the change. SQL semantics: NULL keys
never match.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators.partitions import colocated, one_partition
from dd_etl.trace.columns import DIFF, TIME

History = Callable[[DataFrame], DataFrame]
"""Given a DataFrame of key columns, the arrangement's accumulated contents
before the interval for those keys: data columns plus ``_diff``."""


def matchable_keys(df: DataFrame, key: Sequence[str], null_safe: bool) -> DataFrame:
    """The keys of ``df``'s rows a join can match (without ``null_safe``, not
    NULL), one per row."""
    keys = df.select(*key)
    if null_safe:
        return keys
    return keys.where(functools.reduce(lambda a, b: a & b, [F.col(k).isNotNull() for k in key]))


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
    left, right = colocated(left, right)
    lhs = left.alias("l")
    rhs = right.alias("r")
    pairs = zip(lk, rk, strict=True)
    if null_safe:
        cond = [F.col(f"l.{a}").eqNullSafe(F.col(f"r.{b}")) for a, b in pairs]
    else:
        cond = [F.col(f"l.{a}") == F.col(f"r.{b}") for a, b in pairs]
    return lhs.join(rhs, cond, "inner").select(
        *[F.col(f"l.{c}").alias(c) for c in left_columns],
        *[F.col(f"r.{c}").alias(c) for c in right_columns],
        *[F.greatest(F.col(f"l.{t}"), F.col(f"r.{t}")).alias(t) for t in times],
        (F.col(f"l.{DIFF}") * F.col(f"r.{DIFF}")).alias(DIFF),
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
    history_time: int,
    null_safe: bool = False,
) -> DataFrame:
    hist_time = F.lit(history_time).cast("long")
    h_right = right_history(join_keys(d_left, lk, null_safe).toDF(*rk)).withColumn(TIME, hist_time)
    h_left = left_history(join_keys(d_right, rk, null_safe).toDF(*lk)).withColumn(TIME, hist_time)
    both = h_right.unionByName(d_right)
    first = pair(d_left, both, lk, rk, right_columns, left_columns, null_safe)
    second = pair(h_left, d_right, lk, rk, right_columns, left_columns, null_safe)
    return one_partition(first.unionByName(second))
