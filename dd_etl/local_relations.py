"""Rows the driver holds, handed to Spark as local relations.

Spark sees a local relation's rows: it plans by their true size, and an empty
one prunes whatever it feeds (a join with it, a branch of a union) when a plan
is optimised. A frame made from Python rows or an empty RDD is opaque to it,
so every plan over it shuffles and runs tasks, even over nothing.

Past ``spark.sql.execution.arrow.localRelationThreshold`` bytes of Arrow, Spark
makes the frame an RDD of the Arrow batches instead: a small interval sets that
low (``runtime/sizing.py``), as a large local relation's rows cost the optimizer
and the task time in proportion to their number.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dd_etl.spark_driver import driver_for


def local_relation(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` (of ``schema``'s Arrow types) as a Spark local relation."""
    if table.num_rows == 0:
        return empty_frame(spark, schema)
    return driver_for(spark).local_relation(table, schema)


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """No rows of ``schema``, as a relation Spark knows to be empty (opening a
    pipeline infers its schemas from one per schema)."""
    return driver_for(spark).empty_frame(schema)
