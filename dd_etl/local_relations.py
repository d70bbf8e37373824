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

import os
import tempfile

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from dd_etl import sql_text


def local_relation(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` (of ``schema``'s Arrow types) as a Spark local relation.

    What ``createDataFrame`` does with an Arrow table, less its configuration
    look-ups: an Arrow stream in a file the JVM reads, in 2 JVM calls instead of
    about 40 (``sql_text`` says why that counts)."""
    if table.num_rows == 0:
        return empty_frame(spark, schema)
    if spark.sparkContext._encryption_enabled:  # data must then cross by socket
        return spark.createDataFrame(table, schema)
    with (
        tempfile.NamedTemporaryFile(suffix=".arrows", delete=False) as out,
        pa.ipc.new_stream(out, table.schema) as stream,
    ):
        stream.write_table(table)
    try:
        jvm = spark._jvm
        batches = sql_text.jvm_member(jvm, _READ_ARROW)(out.name)
        jdf = sql_text.jvm_member(jvm, _TO_DATAFRAME)(batches, schema.json(), spark._jsparkSession)
    finally:
        os.unlink(out.name)
    return DataFrame(jdf, spark)


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """No rows of ``schema``, as a relation Spark knows to be empty: a local
    relation of no rows made in the JVM, with no Arrow stream to write and read
    (opening a pipeline infers its schemas from one per schema, which took a
    fifth of the opening in a fresh JVM)."""
    session = spark._jsparkSession
    rows = sql_text.jvm_member(spark._jvm, "java.util.ArrayList")()
    return DataFrame(session.createDataFrame(rows, session.parseDataType(schema.json())), spark)


_READ_ARROW = "org.apache.spark.sql.api.python.PythonSQLUtils.readArrowStreamFromFile"
_TO_DATAFRAME = "org.apache.spark.sql.api.python.PythonSQLUtils.toDataFrame"
