"""Which writes share a Spark job, from their costs and Spark's memory alone; what a
pipeline gets when it names no driver memory; and Spark's resource errors told
apart from bugs. No Spark."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.errors import PySparkException

from dd_etl.spark_memory import (
    GIB,
    SparkMemory,
    SparkOutOfMemory,
    default_driver_memory,
    driver_memory,
    exhausted,
    size_bytes,
)
from dd_etl.trace.batch_writer import _in_jobs
from dd_etl.trace.job_groups import COLLECTED_SHARE, ROW_BYTES, Job, WriteCost, job_groups

MIB = 1 << 20


def memory(pool_mib: int, page_mib: int = 4, tasks: int = 2) -> SparkMemory:
    return SparkMemory(pool_mib * MIB, page_mib * MIB, tasks, "spark.driver.memory", "1g")


def test_spark_sizes_its_pool_and_pages_from_the_heap() -> None:
    """60 % of the heap above 300 MB; pages of a sixteenth of a task's share, to a
    power of two between 1 and 64 MiB: a bigger heap has bigger pages, so as many
    of them fit a task whatever the heap."""
    small = SparkMemory.of_heap(512 * MIB, 2, "spark.driver.memory", "512m")
    assert small.pool_bytes == int((512 - 300) * MIB * 0.6)
    assert small.page_bytes == 4 * MIB
    large = SparkMemory.of_heap(6 * GIB, 2, "spark.driver.memory", "6g")
    assert large.page_bytes == 64 * MIB
    assert SparkMemory.of_heap(100 * MIB, 2, "x", "100m").pool_bytes == MIB
    fifth = SparkMemory.of_heap(512 * MIB, 2, "spark.driver.memory", "512m", fraction="0.2")
    assert fifth.pool_bytes == int((512 - 300) * MIB * 0.2)


def test_a_pipeline_naming_no_driver_memory_gets_a_quarter_of_the_machine() -> None:
    assert default_driver_memory(24 * GIB) == "6144m"
    assert default_driver_memory(2 * GIB) == "1024m"  # never below 1 GiB
    assert default_driver_memory(256 * GIB) == "8192m"  # nor above 8
    assert default_driver_memory(0) == "1024m"  # a machine that does not tell
    assert driver_memory({"spark.driver.memory": "3g"}).describe().startswith("3g (spark.")
    chosen = driver_memory({})
    assert chosen.chosen and "set spark.driver.memory" in chosen.describe()
    assert [size_bytes(t) for t in ("512m", "4g", "2048", "1t", "lots")] == [
        512 * MIB,
        4 * GIB,
        2048 * MIB,
        1 << 40,
        None,
    ]


def test_writes_are_split_into_a_job_per_task_slot_of_about_even_cost() -> None:
    """Two tasks at once: ten small writes are two jobs of five, side by side; a
    heavy write is a run of its own, the light ones after it the other."""
    assert job_groups([WriteCost(1)] * 10, memory(4096)) == [
        Job([0, 1, 2, 3, 4]),
        Job([5, 6, 7, 8, 9]),
    ]
    assert job_groups([WriteCost(4)] + [WriteCost(1)] * 4, memory(4096)) == [
        Job([0]),
        Job([1, 2, 3, 4]),
    ]
    assert job_groups([WriteCost(1)], memory(4096, tasks=8)) == [Job([0])]


def test_a_job_holds_a_task_share_and_a_larger_write_runs_alone() -> None:
    """A task's share of a 120 MiB pool (two tasks at once) holds twelve operators of
    a 4 MiB page and 1 MiB of hash slots each: consecutive writes fill a job to
    that, and a write of more than a share is a job run alone, where its task has
    the whole pool."""
    costs = [WriteCost(5), WriteCost(5), WriteCost(13), WriteCost(2), WriteCost(6)]
    costs += [WriteCost(6), WriteCost(12), WriteCost(1)]
    assert job_groups(costs, memory(120)) == [
        Job([2], alone=True),
        Job([0, 1, 3]),
        Job([4]),
        Job([5]),
        Job([6]),
        Job([7]),
    ]


def test_the_rows_a_job_brings_to_the_driver_are_bounded() -> None:
    """An eighth of the pool in rows for the jobs running at once; the rows of a
    write whose count the logs bound count."""
    budget = 64 * MIB // COLLECTED_SHARE // 2 // ROW_BYTES  # rows per job, two at once
    costs = [WriteCost(1, budget // 3)] * 7
    assert job_groups(costs, memory(64, page_mib=1)) == [Job([0, 1, 2]), Job([3, 4, 5]), Job([6])]


@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 200_000)), max_size=60),
    st.integers(64, 4096),
    st.integers(1, 8),
)
def test_every_write_is_in_one_job_and_each_fits(
    costs: list[tuple[int, int]], pool_mib: int, tasks: int
) -> None:
    spark = memory(pool_mib, page_mib=2, tasks=tasks)
    writes = [WriteCost(o, r) for o, r in costs]
    jobs = job_groups(writes, spark)
    assert sorted(i for job in jobs for i in job.writes) == list(range(len(writes)))
    share = spark.pool_bytes // spark.tasks
    for job in jobs:
        assert job.writes == sorted(job.writes)
        if job.alone:
            assert len(job.writes) == 1 and writes[job.writes[0]].bytes(spark) > share
            continue
        assert sum(writes[i].bytes(spark) for i in job.writes) <= share
        rows = sum(writes[i].records * ROW_BYTES for i in job.writes)
        assert rows <= spark.pool_bytes // COLLECTED_SHARE // spark.tasks or len(job.writes) == 1


@given(st.integers(1, 60), st.integers(1, 8))
def test_writes_of_one_cost_keep_every_task_slot_busy(count: int, tasks: int) -> None:
    jobs = job_groups([WriteCost(1)] * count, memory(4096, page_mib=2, tasks=tasks))
    assert len(jobs) == min(count, tasks)


def test_spark_running_out_of_memory_is_told_apart_from_a_bug() -> None:
    try:
        try:
            raise RuntimeError("Job aborted: org.apache.spark.memory.SparkOutOfMemoryError: ...")
        except RuntimeError as e:
            raise ValueError("calling o42.getResult") from e
    except ValueError as wrapped:
        assert exhausted(wrapped) == "SparkOutOfMemoryError"
    assert exhausted(ValueError("[DIVIDE_BY_ZERO] Division by zero")) is None
    error = SparkOutOfMemory("layer 3 of the run", memory(100), "ExecutorLostFailure")
    assert error.exit_code == 3
    assert "raise spark.driver.memory" in error.message and "100 MiB" in error.message


def test_a_job_out_of_memory_is_computed_again_in_halves() -> None:
    """Halves, a task each, halved again while they fail; a write failing alone is
    ``SparkOutOfMemory``; an error that is not Spark's memory is not retried. A
    job that failed beside others is halved right away, or tried alone if it is
    one write."""
    ran: list[list[int]] = []

    def job(tasks: Sequence[Sequence[int]], fits: int = 2) -> list[int]:
        items = [i for task in tasks for i in task]
        ran.append(items)
        if len(items) > fits:
            raise PySparkException(message="[AGGREGATE_OUT_OF_MEMORY] No enough memory")
        return [10 * i for i in items]

    assert _in_jobs(job, [[0, 1, 2], [3, 4]], memory(64), "layers/1") == [0, 10, 20, 30, 40]
    assert ran == [[0, 1, 2, 3, 4], [0, 1, 2], [0, 1], [2], [3, 4]]
    with pytest.raises(SparkOutOfMemory, match="layers/1"):
        _in_jobs(lambda tasks: job(tasks, fits=0), [[0, 1]], memory(64), "layers/1")
    ran.clear()
    assert _in_jobs(job, [[0, 1, 2]], memory(64), "layers/1", again=True) == [0, 10, 20]
    assert ran == [[0, 1], [2]]
    ran.clear()
    assert _in_jobs(job, [[7]], memory(64), "layers/1", again=True) == [70]
    assert ran == [[7]]

    def bug(tasks: Sequence[Sequence[int]]) -> list[int]:
        raise PySparkException(message="[DIVIDE_BY_ZERO] not about memory")

    with pytest.raises(PySparkException, match="DIVIDE_BY_ZERO"):
        _in_jobs(bug, [[0, 1]], memory(64), "layers/1")
