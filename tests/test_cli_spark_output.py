"""A ``dd-etl`` command that starts Spark prints dd_etl's output only: the JVM's
own lines (log4j banner, default log level, native-library and loopback
warnings), and PySpark's log of each SQL error it raises, reach standard error
only under ``--debug``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.lake import Location
from dd_etl.spark import SPARK_LOGS_ENV
from dd_etl.trace import delta_log, spark_files
from dd_etl.trace.state import TraceState

ROOT = Path(__file__).resolve().parent.parent
SPARK_LINES = ("log4j", "Setting default log level", "WARN", "WARNING")


def dd_etl(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``dd-etl`` script (``python -m dd_etl.cli`` without one), on
    this checkout's package."""
    script = Path(sys.executable).parent / "dd-etl"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dd_etl.cli"]
    env = {k: v for k, v in os.environ.items() if k != SPARK_LOGS_ENV}
    env.update(PYTHONPATH=str(ROOT), DD_ETL_SPARK_MASTER="local[1]")
    return subprocess.run(
        [*command, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_spark_start_up_lines_show_only_under_debug(tmp_path: Path) -> None:
    state = TraceState.new("t", 1, ("k",), StructType([StructField("k", LongType())]).json())
    trace = str(tmp_path / "t")
    delta_log.create(Location.of(trace), state, to_arrow_schema(spark_files.stored_schema(state)))

    quiet = dd_etl("trace", "compact", trace)  # opens the trace on a new SparkSession
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip() == "merged 0 records of work: 0 → 0 batches"
    assert quiet.stderr == ""

    debug = dd_etl("--debug", "trace", "compact", trace)
    assert debug.returncode == 0, debug.stderr
    assert any(line in debug.stderr for line in SPARK_LINES), debug.stderr


@pytest.mark.spark
def test_pyspark_does_not_log_the_errors_it_raises(
    spark: SparkSession, capfd: pytest.CaptureFixture[str]
) -> None:
    """dd_etl renders the error itself (e.g. a source's malformed value), once."""
    capfd.readouterr()
    bad = spark.createDataFrame([("thirty",)], "amount string")
    with pytest.raises(PySparkException, match="CAST_INVALID_INPUT"):
        bad.select(bad.amount.cast("bigint")).collect()
    assert capfd.readouterr().err == ""
