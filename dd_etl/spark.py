"""The SparkSession dd_etl runs on: one per process, configured for Delta-compatible output."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.enable.summary-metadata": "false",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.ui.showConsoleProgress": "false",
    # PySpark otherwise records the Python call site of every DataFrame call in the
    # JVM (several round trips each): about a third of planning a run's ~1,500 calls.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def session(
    app_name: str = "dd_etl",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession (local by default)."""
    # Python workers (for the few Python reductions) run this interpreter, with
    # the same packages, unless the deployment says otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("DD_ETL_SPARK_MASTER", "local[*]")
    )
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
