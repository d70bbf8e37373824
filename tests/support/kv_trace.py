"""The rows of the trace tests: a trace of ``(k long, v string)`` records, updates
written as a Spark frame, and a frame read back as ``{(k, v): diff}``."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tests.support.model_storage import Update

SCHEMA = StructType([StructField("k", LongType()), StructField("v", StringType())])
COLUMNS = "k long, v string, _time long, _diff long"


def frame(spark: SparkSession, updates: list[Update]) -> DataFrame:
    rows = [(d[0], d[1], t[0], n) for d, t, n in updates]
    return spark.createDataFrame(rows, COLUMNS)


def contents(df: DataFrame) -> dict[tuple[object, ...], int]:
    return {(r["k"], r["v"]): r["_diff"] for r in df.collect()}
