from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from dd_etl.server.identity import SERVER_ENV
from dd_etl.spark import session

# Every ``dd-etl`` a test starts runs in its own process, as it did before servers:
# a test of the server turns it on, with a directory of its own.
os.environ[SERVER_ENV] = "off"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for the whole test run: starting Spark costs seconds."""
    s = session(
        "dd_etl-tests",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
        },
    )
    yield s
    s.stop()
