"""Crash safety: SIGKILL a real process during appends and merges, then check the
trace is exactly at some state an uninterrupted run passes through, and that
re-running finishes the work with nothing lost or duplicated."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from dd_etl.trace.delta_trace import DeltaTrace
from tests.support.crash_workload import EPOCHS, expected_updates, run
from tests.support.kv_trace import contents
from tests.support.model_storage import accumulate

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def child(uri: Path, failpoints: str = "") -> subprocess.Popen[str]:
    env = {**os.environ, "DD_ETL_FAILPOINTS": failpoints, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.crash_workload", str(uri)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def assert_consistent(spark: SparkSession, uri: Path) -> None:
    """The trace is at some upper k and holds exactly the updates of epochs < k."""
    trace = DeltaTrace(spark, str(uri))
    state = trace.state
    state.check()
    assert all((uri / f.path).exists() for f in trace.files())
    for m in state.merges:
        assert all((uri / f.path).exists() for f in m.staged)
    upper = state.upper.epoch_bound() or 0
    reference = expected_updates(upper)
    assert contents(trace.read_at()) == accumulate(reference, None)
    since = state.since.epoch_bound() or 0
    for t in range(since, upper):
        assert contents(trace.read_at((t,))) == accumulate(reference, (t,))


def assert_finishes_exactly_once(spark: SparkSession, uri: Path) -> None:
    trace = run(spark, str(uri))
    assert trace.state.upper.epoch_bound() == EPOCHS
    assert not trace.state.merges
    assert contents(trace.read_at()) == accumulate(expected_updates(EPOCHS), None)
    trace.vacuum(retention_hours=0)
    on_disk = {p.relative_to(uri).as_posix() for p in (uri / "data").rglob("*.parquet")}
    assert on_disk == {f.path for f in trace.files()}


@pytest.mark.parametrize(
    "failpoint",
    [
        "append.files_written=1",
        "append.files_written=4",
        "append.committed=2",
        "merge.slice_written=1",
        "merge.slice_written=3",
        "merge.step_committed=2",
    ],
)
def test_killed_at_a_failpoint(spark: SparkSession, tmp_path: Path, failpoint: str) -> None:
    uri = tmp_path / "trace"
    proc = child(uri, failpoint)
    proc.wait(timeout=300)
    assert proc.returncode == -signal.SIGKILL, "the failpoint was never reached"
    assert_consistent(spark, uri)
    assert_finishes_exactly_once(spark, uri)


@pytest.mark.parametrize("seed", [11, 12])
def test_killed_at_a_random_moment(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    uri = tmp_path / "trace"
    proc = child(uri)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(random.Random(seed).uniform(1.0, 8.0))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    if (uri / "_delta_log").exists():
        assert_consistent(spark, uri)
    assert_finishes_exactly_once(spark, uri)
