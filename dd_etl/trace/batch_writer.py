"""The one way batches are written: planned first, computed together, then each
committed by its own writer.

Every write of a run is one of these: a layer's trace batches, a loop's inner
traces at an epoch, the sources taking an epoch in, a tick's sinks. Each is
planned apart (``Write``), and the interval's ``Placement``, decided once by the
caller, says how Spark computes them together:

* in the driver's placement, Spark jobs compute the rows of all of them into the
  driver (``collect_batches``), as many writes a job as Spark's memory allows,
  a job for each task slot (``job_groups``), the jobs side by side; each write
  commits the rows it is handed, with no Spark job of its own: the few hundred
  rows of a small interval cost a job a core, not a job each;
* on the executors, one Spark job writes the files of those batches that ask to
  be written with others (``executor_writes.write_each``), and each commits the
  files written for it;
* any write given nothing (more rows than the driver takes, a batch written
  alone, a failed shared job retried apart) computes and writes itself.

A shared job that runs Spark out of memory (or loses an executor) is run again,
once the jobs beside it are done, as two jobs of half its writes each, one after
the other (so each task has the pool to itself), halved again while they fail;
a write that fails alone is ``SparkOutOfMemory``, naming what to raise. A crash
between the shared jobs and the commits loses nothing: files nobody committed
are never read, and the next run plans the same writes again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark import InheritableThread
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from dd_etl.failpoints import failpoint
from dd_etl.lattice import Antichain
from dd_etl.profiling import count_grouped, current_trace, traced
from dd_etl.spark_memory import SparkMemory, SparkOutOfMemory, exhausted
from dd_etl.trace.batch import WrittenBatch
from dd_etl.trace.delta_trace import CollectedBatch, DeltaTrace, PlannedBatch, collect_batches
from dd_etl.trace.executor_writes import ExecutorBatch, write_each
from dd_etl.trace.job_groups import Job, WriteCost, job_groups
from dd_etl.trace.placement import Placement
from dd_etl.trace.state import TraceState

R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")
T = TypeVar("T")
U = TypeVar("U")
SPARK_ERRORS = (PySparkException, Py4JJavaError)

Computed = CollectedBatch | WrittenBatch
"""What the shared job made of a write: its rows in the driver, or its files."""


class Write(Protocol[R_co]):
    """A write planned and not yet made; ``commit`` makes it (what it returns is
    the caller's: whether a trace appended, what a sink committed)."""

    def to_collect(self) -> PlannedBatch | None:
        """Its rows, planned for a job computing several writes' into the driver;
        None: it has none, or writes them itself."""
        ...

    def to_write_on_executors(self) -> ExecutorBatch | None:
        """Its batch, planned for a job writing several on the executors; None: it
        is written alone, or has none."""
        ...

    @property
    def cost(self) -> WriteCost:
        """What its plan holds in a task, for the writes sharing a job to fit."""
        ...

    def commit(self, computed: Computed | None) -> R_co:
        """Make the write, of what the shared job ``computed`` for it, or (None) of
        rows it computes itself."""
        ...


def write_together(
    writes: Sequence[Write[R]],
    placement: Placement,
    memory: SparkMemory,
    pool: Executor | None = None,
    job_label: str | None = None,
    after_job: str | None = None,
) -> list[R]:
    """Make ``writes`` (their results in order): their rows computed by shared
    Spark jobs as ``placement`` says and ``memory`` allows (``computed_together``),
    then each committed, side by side on ``pool`` when given (separate tables
    commit independently), else in turn."""
    computed = computed_together(writes, placement, memory, pool, job_label, after_job)
    made = list(zip(writes, computed, strict=True))
    return _each(pool, lambda wc: wc[0].commit(wc[1]), made)


def computed_together(
    writes: Sequence[Write[object]],
    placement: Placement,
    memory: SparkMemory,
    pool: Executor | None = None,
    job_label: str | None = None,
    after_job: str | None = None,
) -> list[Computed | None]:
    """What shared Spark jobs compute for each of ``writes`` as ``placement`` says
    (None for a write left to itself), planned side by side on ``pool``; no job
    when none is needed. In the driver's placement the writes share jobs as
    ``memory`` allows (``job_groups``). The jobs' work is attributed to
    ``job_label`` in the run's profile, and the failpoint ``after_job`` is
    reached once they ran."""
    label = traced(job_label) if job_label is not None else nullcontext()
    computed: list[Computed | None] = [None] * len(writes)
    what = job_label or "a shared job"
    if placement.driver:
        plans = _each(pool, lambda w: w.to_collect(), writes)
        ids = [i for i, p in enumerate(plans) if p is not None]
        planned = [p for p in plans if p is not None]
        if not planned:
            return computed
        with label:
            jobs = job_groups([writes[i].cost for i in ids], memory)
            count_grouped(len(jobs))
            spark = planned[0].session
            batches = _side_by_side(collect_batches, planned, jobs, memory, what, spark)
            for job, collected in zip(jobs, batches, strict=True):
                for j, batch in zip(job.writes, collected, strict=True):
                    computed[ids[j]] = batch
    else:
        executor_batches = _each(pool, lambda w: w.to_write_on_executors(), writes)
        together = [(i, b) for i, b in enumerate(executor_batches) if b is not None]
        if not together:
            return computed
        with label:
            written = _in_jobs(_write_each, [[b] for _, b in together], memory, what)
        for (i, _), files in zip(together, written, strict=True):
            computed[i] = files
    if after_job is not None:
        failpoint(after_job)
    return computed


def _side_by_side(
    job: Callable[[Sequence[Sequence[T]]], Sequence[U]],
    items: Sequence[T],
    jobs: Sequence[Job],
    memory: SparkMemory,
    what: str,
    spark: SparkSession,
) -> list[list[U]]:
    """The results of ``jobs``, each ``job`` over its ``items`` in one task: those
    that share the pool run ``memory.tasks`` at a time, launched from threads of
    their own (Spark's driver plans a job on the thread that launches it) that
    inherit the caller's job group and trace; then, one at a time, each job that
    needs the pool alone and each that ran Spark out of memory beside others
    (``_in_jobs``, halving those)."""
    results: dict[int, list[U]] = {}
    alone = [k for k, j in enumerate(jobs) if j.alone]
    shared = [k for k, j in enumerate(jobs) if not j.alone]
    exhausted_beside: set[int] = set()
    label = current_trace()  # the threads' jobs are the caller's

    def attempt(k: int) -> None:
        with traced(label) if label is not None else nullcontext():
            try:
                results[k] = _once(job, [[items[i] for i in jobs[k].writes]], what)
            except SPARK_ERRORS as e:
                if exhausted(e) is None:
                    raise
                exhausted_beside.add(k)

    if len(shared) > 1:
        failed: list[BaseException] = []

        def lane(ks: Sequence[int]) -> None:
            try:
                for k in ks:
                    attempt(k)
            except BaseException as e:  # raised again by the caller's thread
                failed.append(e)

        lanes = [shared[i :: memory.tasks] for i in range(min(memory.tasks, len(shared)))]
        threads = [InheritableThread(lane, args=(ks,), session=spark) for ks in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failed:
            raise failed[0]
    else:
        alone = shared + alone
    for k in sorted([*alone, *exhausted_beside]):
        writes = [items[i] for i in jobs[k].writes]
        results[k] = _in_jobs(job, [writes], memory, what, again=k in exhausted_beside)
    return [results[k] for k in range(len(jobs))]


def _once(
    job: Callable[[Sequence[Sequence[T]]], Sequence[U]], tasks: Sequence[Sequence[T]], what: str
) -> list[U]:
    failpoint(f"{what}.job")
    return list(job(tasks))


def _in_jobs(
    job: Callable[[Sequence[Sequence[T]]], Sequence[U]],
    tasks: Sequence[Sequence[T]],
    memory: SparkMemory,
    what: str,
    again: bool = False,
) -> list[U]:
    """``job(tasks)``: one Spark job, computing the items of each task together;
    if it runs Spark out of memory (``again``: it did, beside other jobs), the
    items in two jobs of one task each, halved again while they fail, and
    ``SparkOutOfMemory`` if one fails alone. The results of the items, in order."""
    items = [item for task in tasks for item in task]
    if not again or len(items) == 1:
        try:
            return _once(job, tasks, what)
        except SPARK_ERRORS as e:
            sign = exhausted(e)
            if sign is None:
                raise
            if len(items) == 1:
                raise SparkOutOfMemory(what, memory, sign) from e
    half = (len(items) + 1) // 2
    return [
        *_in_jobs(job, [items[:half]], memory, what),
        *_in_jobs(job, [items[half:]], memory, what),
    ]


def _write_each(tasks: Sequence[Sequence[ExecutorBatch]]) -> list[WrittenBatch]:
    """``write_each``, whose job slices each batch into tasks itself."""
    return write_each([batch for task in tasks for batch in task])


def _each(pool: Executor | None, f: Callable[[T], U], items: Sequence[T]) -> list[U]:
    return list(pool.map(f, items)) if pool is not None else [f(x) for x in items]


@dataclass(frozen=True)
class TraceAppend:
    """A trace's batch for ``[lower, upper)``, planned: a ``Write`` whose commit is
    the trace's compare-and-append (True when it appended, False when the trace
    held the interval already)."""

    trace: DeltaTrace
    updates: DataFrame | CollectedBatch
    """Its rows planned, or already in the driver's hands."""
    lower: Antichain
    upper: Antichain
    placement: Placement
    """Where its rows are computed when it writes them itself."""
    at_most: int | None = None
    """A bound of its records the caller knows, so that nothing counts them; 0: it
    is surely empty, committed with no Spark job."""
    distinct: bool = False
    """No two updates share data and time: nothing to sum."""
    meta: Mapping[str, str] | None = None
    holds: Callable[[TraceState], TraceState] | None = None
    """Readers' holds moved in the append's commit."""
    slices_log2: int | None = None
    """On the executors: written with others' batches in ``2 ** slices_log2``
    slices of its key hashes; None: written alone, by as many tasks as a count
    of it calls for."""
    label: str | None = None
    """What its commit's work is attributed to in the run's profile (None: the
    caller's label)."""
    operators: int = 1
    """Hash tables and sorts its plan runs in a task (``plan.graph.memory_operators``)."""

    @property
    def cost(self) -> WriteCost:
        return WriteCost(self.operators, self.at_most or 0)

    def to_collect(self) -> PlannedBatch | None:
        if self.at_most == 0 or isinstance(self.updates, CollectedBatch):
            return None
        planned = self.trace.batch_plan(self.updates, self.distinct)
        return replace(planned, label=self.label)

    def to_write_on_executors(self) -> ExecutorBatch | None:
        if self.at_most == 0 or self.slices_log2 is None:
            return None
        if isinstance(self.updates, CollectedBatch):
            return None
        batch = self.trace.executor_batch(self.updates, self.distinct, self.slices_log2)
        return replace(batch, label=self.label)

    def commit(self, computed: Computed | None) -> bool:
        with traced(self.label) if self.label is not None else nullcontext():
            if isinstance(computed, WrittenBatch):
                return self.trace.append_written(
                    computed, self.lower, self.upper, self.meta, self.holds
                )
            return self.trace.compare_and_append(
                self.updates if computed is None else computed,
                self.lower,
                self.upper,
                self.meta,
                at_most=self.at_most,
                holds=self.holds,
                distinct=self.distinct,
                placement=self.placement,
            )
