"""Which writes share a Spark job: as many as fit what Spark's memory allows, and
few enough that the jobs keep every task slot busy.

A job is one task, which holds a page of memory for each hash table and sort its
plans run (and a hash table its slots), plus their rows, until it ends. Jobs run
side by side, as many at once as Spark runs tasks, and their tasks share one pool:
so the writes of a job are packed under a task's share of it, and a write needing
more than that runs in a job alone, while no other job does, where its task has
all of the pool. Spark's driver plans a job (optimizes, makes its RDDs) on the
thread that launches it, for a fixed part of a second: one job a core plans a
layer on every core at once, where one job for all planned it on one. So the
writes are split into as many runs of about even cost as Spark runs tasks at once,
no more (each job costs a fixed fraction of a second): a layer of a hundred small
traces is two jobs on two cores, one of heavy traces several. The rows of the jobs
running at once are bounded too, as the driver holds all of a job's before it
writes any. Pure: the costs come from the plans, the memory from the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dd_etl.spark_memory import SparkMemory

ROW_BYTES = 128
"""About what a row takes in a task's tables and in the driver's hands."""
SLOTS_BYTES = 1 << 20
"""What a hash table takes besides its pages before its first row: Spark allocates
an aggregation's map with 65,536 slots of two longs up front."""
COLLECTED_SHARE = 8
"""The rows the jobs running at once bring to the driver take at most this
fraction of the pool: each job's are held whole by the JVM, then by Python,
before any is written."""


@dataclass(frozen=True)
class WriteCost:
    """What a write's plan holds in its task: its hash tables and sorts, and the
    rows it yields, as far as they are known."""

    operators: int = 1
    records: int = 0

    def bytes(self, memory: SparkMemory) -> int:
        return self.operators * (memory.page_bytes + SLOTS_BYTES) + self.records * ROW_BYTES


@dataclass(frozen=True)
class Job:
    """The writes (their indices) one Spark job computes, in one task."""

    writes: list[int]
    alone: bool = False
    """It needs more than a task's share of the pool: it runs while no other job does."""


def job_groups(costs: Sequence[WriteCost], memory: SparkMemory) -> list[Job]:
    """The jobs computing the writes of ``costs``, in order: the writes that fit a
    task's share split into ``memory.tasks`` runs of consecutive writes of about
    even cost, each run into jobs of up to a task's share and of the rows the
    driver takes; a write needing more than a share is a job alone."""
    share = memory.pool_bytes // memory.tasks
    collected = memory.pool_bytes // COLLECTED_SHARE // memory.tasks
    needs = [cost.bytes(memory) for cost in costs]
    total = sum(need for need in needs if need <= share)
    jobs: list[Job] = []
    job: list[int] = []
    job_bytes = job_rows = 0
    run = before = 0

    def close_job() -> None:
        nonlocal job, job_bytes, job_rows
        if job:
            jobs.append(Job(job))
        job, job_bytes, job_rows = [], 0, 0

    for i, (cost, need) in enumerate(zip(costs, needs, strict=True)):
        if need > share:
            jobs.append(Job([i], alone=True))
            continue
        rows = cost.records * ROW_BYTES
        # the run whose even part of the total holds this write's middle
        its_run = min((2 * before + need) * memory.tasks // (2 * total), memory.tasks - 1)
        if its_run != run or job_bytes + need > share or job_rows + rows > collected:
            close_job()
        run = its_run
        job.append(i)
        job_bytes += need
        job_rows += rows
        before += need
    close_job()
    return jobs
