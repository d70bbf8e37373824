"""The same trace workload on a Spark standalone cluster started by infra/spark-standalone.sh."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dd_etl.trace.delta_trace import DeltaTrace
from tests.support.crash_workload import EPOCHS, expected_updates
from tests.support.kv_trace import contents
from tests.support.model_storage import accumulate

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "infra" / "spark-standalone.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    state = tmp_path / "cluster"
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "SPARK_MASTER_PORT": str(free_port()),
        "SPARK_WORKER_CORES": "2",
        "SPARK_WORKER_MEMORY": "2g",
    }
    started = subprocess.run(
        ["bash", str(SCRIPT), "start", str(state)], env=env, capture_output=True, text=True
    )
    try:
        assert started.returncode == 0, started.stderr
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, check=False)


def test_trace_workload_runs_on_a_standalone_cluster(
    cluster: str, spark: SparkSession, tmp_path: Path
) -> None:
    assert cluster.startswith("spark://")
    uri = tmp_path / "trace"
    env = {
        **os.environ,
        "DD_ETL_SPARK_MASTER": cluster,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.crash_workload", str(uri)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout
    trace = DeltaTrace(spark, str(uri))
    assert trace.state.upper.epoch_bound() == EPOCHS
    assert contents(trace.read_at()) == accumulate(expected_updates(EPOCHS), None)
