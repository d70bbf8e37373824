from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from dd_etl.server.identity import SERVER_ENV
from dd_etl.spark import session
from tests.support import tpch_reference
from tests.support.s3_server import S3Server, started

# Every ``dd-etl`` a test starts runs in its own process, as it did before servers:
# a test of the server turns it on, with a directory of its own.
os.environ[SERVER_ENV] = "off"

# Processes a test starts (crash workloads, ``dd-etl`` commands, Dagster, servers)
# run a few short commands each. Their JVMs compile with C1 only: on two cores,
# C2's compilations cost such a process more than they return (crash and process
# tests 7-14 % faster). The tests' own session, which runs for the whole suite,
# keeps both compilers: C1 alone makes its warm epochs 40 % slower.
CHILD_JVMS = "PYSPARK_SUBMIT_ARGS"
os.environ[CHILD_JVMS] = '--driver-java-options "-XX:TieredStopAtLevel=1" pyspark-shell'


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for each test process's whole run: starting Spark costs
    seconds."""
    child_jvms = os.environ.pop(CHILD_JVMS)
    s = session(
        "dd_etl-tests",
        object_storage=True,  # the tests on an S3 server share it too
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
            # tables a test makes with Spark's own catalog (dbt's, for one) go here
            "spark.sql.warehouse.dir": tempfile.mkdtemp(prefix="spark-warehouse-"),
        },
    )
    os.environ[CHILD_JVMS] = child_jvms
    yield s
    s.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3 server (S3Proxy) for each test process's whole run, started for the
    first test asking for it: a bucket per test keeps tests apart."""
    with started() as server:
        yield server


@pytest.fixture(scope="session")
def tpch_local_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tpch_reference.Reference:
    """The TPC-H pipeline's run on local Spark, made once for every test process:
    the cluster's and the Spark Connect server's runs are compared to it."""
    shared = tpch_reference.shared_directory(tmp_path_factory.getbasetemp())
    return tpch_reference.reference(spark, shared)
