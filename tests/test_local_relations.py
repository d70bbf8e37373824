"""Rows the driver hands Spark: a local relation, or Arrow batches once they are large."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dd_etl.local_relations import local_relation
from dd_etl.operators.partitions import join
from dd_etl.runtime.sizing import LOCAL_RELATION_BYTES, SMALL, applied

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", LongType()), StructField("label", StringType())])


def leaf(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().analyzed().getClass().getSimpleName())


def large_table() -> pa.Table:
    rows = LOCAL_RELATION_BYTES // 8
    return pa.table(
        {
            "k": pa.array(range(rows), pa.int64()),
            "label": pa.array([f"row {i}" for i in range(rows)], pa.string()),
        }
    )


def test_a_small_interval_hands_spark_large_row_sets_as_arrow_batches(
    spark: SparkSession,
) -> None:
    large = large_table()
    assert large.nbytes > LOCAL_RELATION_BYTES
    with applied(spark, SMALL):
        batches = local_relation(spark, large, SCHEMA)
        small = local_relation(spark, large.slice(0, 10), SCHEMA)
        empty = local_relation(spark, large.slice(0, 0), SCHEMA)
    # past the threshold the optimizer no longer walks the rows (``sizing.LOCAL_RELATION_BYTES``);
    # below it Spark still sees true sizes and empties
    assert (leaf(batches), leaf(small), leaf(empty)) == (
        "LogicalRDD",
        "LocalRelation",
        "LocalRelation",
    )
    assert leaf(local_relation(spark, large, SCHEMA)) == "LocalRelation"  # outside the sizing
    got = batches.toArrow().sort_by("k")
    assert got.equals(large.cast(got.schema))


def test_a_join_of_arrow_batches_in_a_small_interval_is_one_stage(spark: SparkSession) -> None:
    """Spark cannot size an RDD; taken for its default size, a join of joins over
    such frames would pass ``spark.sql.maxSinglePartitionBytes`` and be shuffled."""
    table = large_table()
    with applied(spark, SMALL):
        joined = (
            join(
                local_relation(spark, table, SCHEMA),
                local_relation(spark, table, SCHEMA).withColumnRenamed("label", "other"),
                "l.k = r.k",
                aliases=("l", "r"),
            )
            .groupBy("label")
            .count()
        )
        other = local_relation(spark, table, SCHEMA).withColumnRenamed("label", "r_label")
        plan = join(joined, other, "label <=> r_label", hash_right=True)
        executed = plan._jdf.queryExecution().executedPlan().toString()
        assert plan.count() == table.num_rows
    assert "Exchange" not in executed
    assert "ShuffledHashJoin" in executed
