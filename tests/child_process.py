"""Running a workload in a child process that a test may kill."""

from __future__ import annotations

import os
from collections.abc import Callable

from pyspark.sql import SparkSession

from dd_etl.spark import session


def main(app_name: str, workload: Callable[[SparkSession], object]) -> None:
    """Start Spark (``DD_ETL_SPARK_MASTER`` or one local core), say ``ready`` so
    the parent can time a kill, run the workload, and say ``done``."""
    spark = session(
        app_name,
        master=os.environ.get("DD_ETL_SPARK_MASTER", "local[1]"),
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    print("ready", flush=True)
    workload(spark)
    print("done", flush=True)
