"""Joins whose one-partition inputs stay in one partition.

When the session shuffles into a single partition (a small interval,
``runtime/sizing.py``), every join input would be shuffled into one partition
anyway; coalescing it to one partition gives the same partitioning with no
exchange, so a plan over one-partition reads runs as a single stage. Spark does
not find this by itself: above a join, its output is reported as a collection of
partitionings, no longer as one partition, and the next join shuffles both sides.
With more shuffle partitions the inputs are left as they are.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def colocated(left: DataFrame, right: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``left`` and ``right`` as a join should take them."""
    return one_partition(left), one_partition(right)


def one_partition(df: DataFrame) -> DataFrame:
    """``df`` in one partition if the session shuffles into one: also for a union of
    joins' outputs, which Spark would otherwise shuffle for the next aggregate."""
    if df.sparkSession.conf.get(SHUFFLE_PARTITIONS) != "1":
        return df
    return df.coalesce(1)
