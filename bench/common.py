"""What every benchmark shares: its Spark session and the environment it records."""

from __future__ import annotations

import os
import platform
from typing import Any

import deltalake
import matplotlib
import pyspark
from pyspark.sql import SparkSession

from dd_etl.spark import session


def spark_session(name: str, memory: str = "4g", count_jobs: bool = False) -> SparkSession:
    """Local Spark on two cores, as on the CI machine; ``count_jobs`` keeps every
    job's record so jobs per run can be counted from the status tracker."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.memory": memory,
    }
    if count_jobs:
        conf |= {"spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000"}
    return session(name, master="local[2]", conf=conf)


def environment(spark: SparkSession, **extra: Any) -> dict[str, Any]:
    """Versions and machine facts recorded next to the results."""
    return {
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "spark": spark.version,
        "deltalake": deltalake.__version__,
        "matplotlib": matplotlib.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "spark_master": spark.sparkContext.master,
        "load_average_1_5_15min": [round(x, 1) for x in os.getloadavg()],
        **extra,
    }
