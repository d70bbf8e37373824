"""Joins whose one-partition inputs stay in one partition.

When the session shuffles into a single partition (a small interval,
``runtime/sizing.py``), every join input would be shuffled into one partition
anyway; coalescing it to one partition gives the same partitioning with no
exchange, so a plan over one-partition reads runs as a single stage. Spark does
not find this by itself: above a join, its output is reported as a collection of
partitionings, no longer as one partition, and the next join shuffles both sides.
With more shuffle partitions the inputs are left as they are.

In one partition, a reduction hashes the keys its changes touch, and the
history it reads for them streams through that hash table: a sort merge join,
Spark's choice without statistics, would sort every history row read. (A
broadcast would cost a Spark job of its own.) Only where a plan has few such
joins: every hashed side of a one-partition plan is held in memory, in pages
of its own, until the task ends, and a plan of many hashed joins (the delta
joins of a TPC-H query) ran out of memory where sorts would have spilled.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from dd_etl.spark_driver import driver_for

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def join(
    left: DataFrame,
    right: DataFrame,
    condition: str,
    how: str = "inner",
    *,
    hash_right: bool = False,
    aliases: tuple[str, str] | None = None,
    select: Sequence[str] | None = None,
) -> DataFrame:
    """``left`` joined with ``right`` on the SQL ``condition``, each side as the join
    should take it: in one partition if the session shuffles into one, and then
    with ``hash_right`` ``right`` (the smaller side, one the join type can build)
    hashed. ``aliases`` name the sides for the condition, ``select`` and what
    reads the join; ``select``, a SQL select list, its columns (default: all)."""
    one = _one_partition(left)
    return driver_for(left.sparkSession).join(
        left,
        right,
        condition,
        how,
        one_partition=one,
        hash_right=one and hash_right,
        aliases=aliases,
        select=select,
    )


def one_partition(df: DataFrame) -> DataFrame:
    """``df`` in one partition if the session shuffles into one: also for a union of
    joins' outputs, which Spark would otherwise shuffle for the next aggregate."""
    return df.coalesce(1) if _one_partition(df) else df


def union(*dfs: DataFrame) -> DataFrame:
    """The union of ``dfs`` (by column name), in one partition if the session
    shuffles into one: Spark reports a union's partitioning as unknown even when
    every input is one partition, and shuffles it for the next aggregate or join."""
    one = _one_partition(dfs[0])
    return driver_for(dfs[0].sparkSession).union(dfs, by_name=True, one_partition=one)


def _one_partition(df: DataFrame) -> bool:
    return df.sparkSession.conf.get(SHUFFLE_PARTITIONS) == "1"
