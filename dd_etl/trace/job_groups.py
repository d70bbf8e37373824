"""Which writes share a Spark job, and which of them one task computes: as many as
fit what Spark's memory allows.

A task holds a page of memory for each hash table and sort its plans run (and a
hash table its slots), plus their rows, until it ends; the tasks of a job run
``SparkMemory.tasks`` at a time and share one pool. So the writes a task
computes together are packed under a task's share of the pool, a write needing
more than that runs in a job alone (where its task has all of the pool), and a
job is as many tasks as Spark runs at once: every task of a job deserializes the
plans of the whole job, so more tasks than cores would only repeat that work. A
job's rows are bounded too, as the driver holds all of them before it writes
any. Few jobs is the point (each costs a fixed fraction of a second): a layer of
a hundred small traces is one job or a few, one of heavy traces several. Pure:
the costs come from the plans, the memory from the session.
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
"""The rows one job brings to the driver take at most this fraction of the pool:
they are held whole by the JVM, then by Python, before any is written."""

Job = list[list[int]]
"""The writes (their indices) of each task of one job."""


@dataclass(frozen=True)
class WriteCost:
    """What a write's plan holds in its task: its hash tables and sorts, and the
    rows it yields, as far as they are known."""

    operators: int = 1
    records: int = 0

    def bytes(self, memory: SparkMemory) -> int:
        return self.operators * (memory.page_bytes + SLOTS_BYTES) + self.records * ROW_BYTES


def job_groups(costs: Sequence[WriteCost], memory: SparkMemory) -> list[Job]:
    """The jobs computing the writes of ``costs``, each as its tasks' writes, in
    order: consecutive writes share a task up to a task's share of the pool, a
    job holds as many tasks as run at once and as many rows as the driver takes,
    and a write needing more than a task's share is a job of its own."""
    share = memory.pool_bytes // memory.tasks
    collected = memory.pool_bytes // COLLECTED_SHARE
    jobs: list[Job] = []
    job: Job = []
    task: list[int] = []
    task_bytes = job_rows = 0

    def close_task() -> None:
        nonlocal task, task_bytes
        if task:
            job.append(task)
        task, task_bytes = [], 0

    def close_job() -> None:
        nonlocal job, job_rows
        close_task()
        if job:
            jobs.append(job)
        job, job_rows = [], 0

    for i, cost in enumerate(costs):
        need, rows = cost.bytes(memory), cost.records * ROW_BYTES
        if need > share:
            jobs.append([[i]])
            continue
        if task and task_bytes + need > share:
            close_task()
            if len(job) == memory.tasks:
                close_job()
        if (job or task) and job_rows + rows > collected:
            close_job()
        task.append(i)
        task_bytes += need
        job_rows += rows
    close_job()
    return jobs
