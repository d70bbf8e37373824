"""Running a workload in a child process that a test may kill."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from dd_etl.spark import session

ROOT = Path(__file__).resolve().parents[2]


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


def run_workload(
    module: str, argument: str | Path, failpoint: str, *more: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module argument [more…]`` with ``failpoint`` armed (it kills
    itself there)."""
    env = {**os.environ, "DD_ETL_FAILPOINTS": failpoint, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", module, str(argument), *more],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet waited for, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


def dd_etl_process(
    *args: str, failpoints: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``dd-etl ARGS`` in a process of its own on one local core, killed at
    ``failpoints`` (none when empty)."""
    more = {"DD_ETL_FAILPOINTS": failpoints} if failpoints else {}
    return subprocess.run(
        [sys.executable, "-c", "from dd_etl.cli import app; app()", *args],
        cwd=ROOT,
        env={**os.environ, "DD_ETL_SPARK_MASTER": "local[1]", **more, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )
