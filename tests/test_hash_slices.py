"""Key-hash slices: Spark's own hash partitioning sends slice ``i`` to task ``i``."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dd_etl.trace.hash_slices import LOWEST, murmur3_int, partition_key, partition_keys, slice_of


@given(st.integers(1, 300))
def test_each_partition_gets_a_key_of_its_own(partitions: int) -> None:
    keys = partition_keys(partitions)
    assert len(set(keys)) == partitions
    assert [murmur3_int(k) % partitions for k in keys] == list(range(partitions))


def test_murmur3_is_the_hash_spark_partitions_by(spark: SparkSession) -> None:
    values = [*range(-50, 2000), 2**31 - 1, -(2**31), 123_456_789]
    df = spark.createDataFrame([(v,) for v in values], "v INT")
    got = {r.v: r.h for r in df.selectExpr("v", "hash(v) AS h").collect()}
    assert got == {v: murmur3_int(v) for v in values}


def test_the_rows_of_slice_i_land_in_partition_i_in_key_hash_order(spark: SparkSession) -> None:
    """Over the whole hash space, and over a part of it (what a merge of one range
    of a trace's hashes writes): each slice in the partition of its index, the
    slices disjoint ranges in hash order, none empty, none with twice its share."""
    for slices, (low, high) in ((7, (LOWEST, -LOWEST)), (5, (-(2**60), 2**61))):
        rows = (
            spark.range(20_000)
            .selectExpr("xxhash64(id) AS _key_hash")
            .where(f"_key_hash >= {low} AND _key_hash < {high}")
            .selectExpr("_key_hash", f"{slice_of(slices, low, high)} AS s")
        )
        placed = rows.repartition(slices, F.expr(partition_key("s", slices)))
        found = sorted(
            placed.groupBy(F.spark_partition_id().alias("p"), "s")
            .agg(
                F.min("_key_hash").alias("lo"),
                F.max("_key_hash").alias("hi"),
                F.count("*").alias("n"),
            )
            .collect(),
            key=lambda r: r.s,
        )
        assert [(r.p, r.s) for r in found] == [(i, i) for i in range(slices)]
        assert all(a.hi < b.lo for a, b in pairwise(found))
        total = sum(r.n for r in found)
        assert max(r.n for r in found) < 2 * total / slices
