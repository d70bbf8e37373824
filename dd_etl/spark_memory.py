"""The memory Spark's tasks have, what a pipeline gets when its file names none, and
how running out of it is told apart from a bug.

A task's hash tables and sorts take memory from one pool that the tasks running
at once share (Spark's unified memory manager: 60 % of the heap above a reserve
of 300 MB), a page at a time, and hold it until the task ends. Running short is
then a matter of what the tasks of a job hold together (``trace/job_groups.py``
groups writes by it), not of a bug: the error says which setting to raise.

A pipeline whose file sets no ``spark.driver.memory`` gets a quarter of the
machine's memory (between 1 and 8 GiB) on local Spark, where the driver's heap
is also the executors': PySpark's default of 1 GB runs out on a few dozen
views. It is decided here, from the pipeline's Spark settings and the machine
alone, so ``status`` and ``explain`` say the same as the run that uses it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from dd_etl.errors import PipelineError

DRIVER_MEMORY = "spark.driver.memory"
EXECUTOR_MEMORY = "spark.executor.memory"
PAGE_SIZE = "spark.buffer.pageSize"
PAGES_PER_TASK = 256
"""Pages of its share of the pool a task can hold, at the page size dd_etl gives
local Spark: Spark's default (a sixteenth of the share) lets a task's plans hold
only about sixteen hash tables and sorts, however much memory there is, and a
hash table of three rows takes a page; a small interval's plans hold dozens."""
RESERVED_BYTES = 300 << 20
"""Heap Spark keeps for itself before sizing its memory pool."""
FRACTION = "spark.memory.fraction"
MEMORY_FRACTION = 0.6
"""Spark's default share of the heap above the reserve that tasks and storage share."""
GIB = 1 << 30


def machine_memory() -> int:
    """Bytes of memory the machine has (0 when it does not tell)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def default_driver_memory(machine: int | None = None) -> str:
    """``spark.driver.memory`` for a pipeline that sets none: a quarter of the
    machine's memory, between 1 and 8 GiB, in whole mebibytes."""
    memory = machine_memory() if machine is None else machine
    chosen = min(max(memory // 4, GIB), 8 * GIB)
    return f"{chosen >> 20}m"


ENV_DRIVER_MEMORY = "SPARK_DRIVER_MEMORY"
"""Spark's own environment variable for the driver's memory, which a deployment may set."""


@dataclass(frozen=True)
class DriverMemory:
    """The driver memory a pipeline runs with, and where it comes from."""

    value: str
    source: str
    """``pipeline`` (its file's ``spark.conf``), ``environment`` or ``machine``
    (dd_etl chose it)."""

    @property
    def chosen(self) -> bool:
        return self.source == "machine"

    def describe(self) -> str:
        if self.source == "pipeline":
            return f"{self.value} ({DRIVER_MEMORY} in the pipeline file)"
        if self.source == "environment":
            return f"{self.value} ({ENV_DRIVER_MEMORY})"
        machine = machine_memory() / GIB
        return (
            f"{self.value} (a quarter of the machine's {machine:.0f} GiB; set "
            f"{DRIVER_MEMORY} under spark.conf to change it)"
        )


def driver_memory(conf: Mapping[str, str]) -> DriverMemory:
    """The driver memory a session with ``conf`` starts with."""
    if DRIVER_MEMORY in conf:
        return DriverMemory(conf[DRIVER_MEMORY], "pipeline")
    if os.environ.get(ENV_DRIVER_MEMORY):
        return DriverMemory(os.environ[ENV_DRIVER_MEMORY], "environment")
    return DriverMemory(default_driver_memory(), "machine")


_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_SCALE = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size_bytes(text: str) -> int | None:
    """Bytes of a JVM memory setting (``512m``, ``4g``; a bare number is mebibytes,
    as Spark reads ``spark.driver.memory``); None if it is not one."""
    match = _SIZE.match(text)
    if match is None:
        return None
    return int(match[1]) * _SCALE[match[2].lower()]


@dataclass(frozen=True)
class SparkMemory:
    """The memory the tasks of one executor share, as Spark sized it."""

    pool_bytes: int
    """The unified pool the tasks running at once share (what storage leaves)."""
    page_bytes: int
    """What a hash table or sort takes at a time: a task holds at least a page for
    each it runs."""
    tasks: int
    """Tasks running at once on one executor."""
    setting: str
    """The Spark setting that gives them more: ``spark.driver.memory`` on local
    Spark, where the executors run in the driver, ``spark.executor.memory``
    elsewhere."""
    shown: str
    """Its value, as a user would write it."""

    @classmethod
    def of_heap(
        cls,
        heap_bytes: int,
        tasks: int,
        setting: str,
        shown: str,
        fraction: str | None = None,
        pages: int = 16,
    ) -> SparkMemory:
        """What Spark makes of a heap of ``heap_bytes`` running ``tasks`` at once:
        its pool (``fraction`` of the heap above the reserve: ``spark.memory.fraction``
        as set, else Spark's default), and pages of a task's share split ``pages``
        ways (Spark's default: 16), to a power of two between 1 and 64 MiB."""
        share_of_heap = float(fraction) if fraction else MEMORY_FRACTION
        pool = max(int((heap_bytes - RESERVED_BYTES) * share_of_heap), 1 << 20)
        share = max(pool // max(tasks, 1) // pages, 1)
        page = min(max(1 << (share - 1).bit_length(), 1 << 20), 64 << 20)
        return cls(pool, page, max(tasks, 1), setting, shown)


def local_page_size(driver: str, tasks: int, fraction: str | None = None) -> str:
    """``spark.buffer.pageSize`` for local Spark of ``driver`` memory (and memory
    ``fraction``) running ``tasks`` at once: a task's share in ``PAGES_PER_TASK`` pages."""
    heap = size_bytes(driver) or GIB
    memory = SparkMemory.of_heap(heap, tasks, DRIVER_MEMORY, driver, fraction, PAGES_PER_TASK)
    return f"{memory.page_bytes >> 20}m"


class SparkOutOfMemory(PipelineError):
    """Spark ran out of memory (or lost an executor) computing ``what``, even one
    write per job: the data or the plans need more than Spark has."""

    def __init__(self, what: str, memory: SparkMemory, cause: str) -> None:
        super().__init__(
            f"Spark ran out of memory computing {what}, even one write a job "
            f"({cause}). Its tasks share {memory.pool_bytes >> 20} MiB "
            f"({memory.setting} = {memory.shown}); raise {memory.setting} under "
            "spark.conf in the pipeline file and run again. Nothing of this step "
            "was committed; what earlier steps committed is kept"
        )
        self.memory = memory
        self.cause = cause


RESOURCE_SIGNS = (
    "SparkOutOfMemoryError",
    "AGGREGATE_OUT_OF_MEMORY",
    "UNABLE_TO_ACQUIRE_MEMORY",
    "java.lang.OutOfMemoryError",
    "ExecutorLostFailure",
    "executor lost",
    "Container killed",
)
"""How Spark's errors say that a task had too little memory or lost its executor."""


def exhausted(error: BaseException) -> str | None:
    """The sign of Spark running out of resources in ``error`` (its message or the
    causes it carries), None if it shows none: then it is not a resource error."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current)
        for sign in RESOURCE_SIGNS:
            if sign in text:
                return sign
        current = current.__cause__ or current.__context__
    return None
