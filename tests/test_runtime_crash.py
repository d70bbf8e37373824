"""Killing a dataflow run at any point and running again gives exactly the views
of an uninterrupted run."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.child_process import run_workload
from tests.support.runtime_workload import EPOCHS, VIEWS, run
from tests.support.trips_and_zones import hashable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def uninterrupted(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[Counter[tuple[object, ...]]]]:
    rt = run(spark, tmp_path_factory.mktemp("clean"))
    return {
        v: [Counter(hashable(tuple(r)) for r in rt.read(v, e).collect()) for e in range(EPOCHS)]
        for v in VIEWS
    }


@pytest.mark.parametrize(
    ("failpoint", "small_records"),
    [
        ("append.committed=9", None),
        ("append.files_written=12", None),
        ("layer.collected=6", None),
        ("append.committed=16", None),
        # sized past small at 8 source records: both runs are. Their batches bounded
        # by the trace logs are written together by the executors, a layer's in one
        # job. At 9, half the layers read few enough records to run small
        ("append.files_written=5", "8"),
        ("layer.written=2", "8"),
        ("layer.collected=1", "9"),
    ],
)
def test_a_killed_run_recovers_to_the_uninterrupted_result(
    spark: SparkSession,
    tmp_path: Path,
    failpoint: str,
    small_records: str | None,
    uninterrupted: dict[str, list[Counter[tuple[object, ...]]]],
) -> None:
    more = () if small_records is None else (small_records,)
    proc = run_workload("tests.support.runtime_workload", tmp_path, failpoint, *more)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr[-2000:]
    rt = run(spark, tmp_path)
    for v in VIEWS:
        for e in range(EPOCHS):
            got = Counter(hashable(tuple(r)) for r in rt.read(v, e).collect())
            assert got == uninterrupted[v][e], (v, e)
