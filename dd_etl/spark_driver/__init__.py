"""What dd_etl asks of Spark's driver beyond the DataFrame API, however Spark is reached.

A session of PySpark's classic kind holds Spark's driver in a JVM of this
process, reached through py4j; a Spark Connect session (``sc://…``) holds only a
client, the driver being a server elsewhere. dd_etl's jobs are DataFrame
operations either way, but a few of its needs are met faster, or only at all,
through the JVM: building wide selects in a fixed number of JVM calls, Arrow
tables as local relations, Spark's size estimate of a plan, whether a plan is
deterministic, how many tasks Spark runs at once, and the jobs a run launched.
``Driver`` is those needs; ``driver_for(session)`` the implementation for the
session's kind, chosen once per session, here only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from dd_etl.spark_memory import SparkMemory


@dataclass(frozen=True)
class StageWork:
    """What a stage's tasks did, at its last attempt, as Spark's status store sums
    it over them."""

    tasks: int
    task_seconds: float
    """Their run time, summed: what the stage cost the executors' cores."""
    input_bytes: int
    """What they read from files."""
    shuffle_read_bytes: int
    shuffle_write_bytes: int


@dataclass
class PlanWork:
    """What the operators of (a part of) an executed plan did, from the metrics Spark
    keeps on its executed plan, summed over their tasks: how the work of a Spark
    job computing several traces' batches splits among them."""

    rows: int = 0
    """The rows the part yielded."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Its task time by the kind of Spark timer that saw it: ``code`` (a stage of
    generated code, its inputs included), ``aggregate``, ``hash build`` (their
    inputs included), ``sort``, ``shuffle write``; each timer counted where no
    timer above it in its task holds it already (``plan_metrics.work_of``)."""
    task_seconds: float = 0.0
    """Its task time: from the plan, the sum of ``seconds``; in a profile, its
    share of its jobs' task time as their stages count it, in proportion to
    that sum (``seconds`` scaled alike)."""
    scanned_bytes: int = 0
    """What its file scans read."""
    shuffled_bytes: int = 0
    """What its exchanges wrote to shuffle files."""
    spilled_bytes: int = 0
    operators: dict[str, int] = field(default_factory=dict)
    """Spark's operators in it, by name, as many as it ran."""

    def add(self, other: PlanWork) -> None:
        self.rows += other.rows
        self.task_seconds += other.task_seconds
        for kind, s in other.seconds.items():
            self.seconds[kind] = self.seconds.get(kind, 0.0) + s
        self.scanned_bytes += other.scanned_bytes
        self.shuffled_bytes += other.shuffled_bytes
        self.spilled_bytes += other.spilled_bytes
        for name, k in other.operators.items():
            self.operators[name] = self.operators.get(name, 0) + k


class DriverStatus(Protocol):
    """What the driver tells of its work: Spark jobs labelled by group, as a run's
    profile counts them per trace, what their stages did, what each part of a
    plan did, and its JVM's compiling."""

    def labelled(self) -> str | None:
        """The label of the jobs this thread launches."""
        ...

    def label(self, group: str | None) -> None:
        """Label the jobs this thread launches from now on."""
        ...

    def job_ids(self, group: str | None) -> list[int]:
        """The jobs Spark still knows of ``group`` (None: of no group)."""
        ...

    def stages(self, job: int) -> list[int]: ...

    def settled(self) -> None:
        """Wait until the status store holds every job and stage finished so far:
        Spark's listener learns of them from events posted after they ran."""
        ...

    def stage_work(self, stage: int) -> StageWork | None:
        """What the stage's tasks did (None once Spark forgot the stage)."""
        ...

    def plan_parts(self, df: DataFrame, parts: int) -> tuple[PlanWork, list[PlanWork]] | None:
        """What ran ``df`` (an action on it done), split into the work of each of the
        ``parts`` children of its union, in order, and the rest; None where the
        plan does not show that many parts (Spark dropped a child it knew empty)."""
        ...

    def compiled_ms(self) -> int | None:
        """Milliseconds the driver JVM's JIT compilers have worked, if it tells."""
        ...


class Driver(Protocol):
    kind: str
    """``classic`` or ``connect``: said where a profile cannot report something."""

    def select(self, df: DataFrame, exprs: Sequence[str]) -> DataFrame:
        """``df.selectExpr(*exprs)``."""
        ...

    def group(self, df: DataFrame, keys: Sequence[str], aggregates: Sequence[str]) -> DataFrame:
        """``GROUP BY keys`` (column names) computing ``aggregates`` (SQL with aliases)."""
        ...

    def union(
        self, dfs: Sequence[DataFrame], *, by_name: bool = False, one_partition: bool = False
    ) -> DataFrame:
        """``dfs`` (of one layout, or with ``by_name`` of the same columns in any
        order) as one union, with ``one_partition`` coalesced into one partition,
        analysed once: a union built one ``DataFrame.union`` at a time is analysed
        again with every child added."""
        ...

    def join(
        self,
        left: DataFrame,
        right: DataFrame,
        condition: str,
        how: str,
        *,
        one_partition: bool = False,
        hash_right: bool = False,
        aliases: tuple[str, str] | None = None,
        select: Sequence[str] | None = None,
    ) -> DataFrame:
        """``left`` joined with ``right`` on the SQL ``condition``, as join type
        ``how``; with ``one_partition`` each side coalesced into one partition,
        with ``hash_right`` the right side hashed, with ``aliases`` the sides named
        for the condition and ``select`` (a SQL select list: the joined rows'
        columns, else all): analysed once, where each of those DataFrame calls
        would be analysed on its own."""
        ...

    def expr(self, text: str) -> Column:
        """``F.expr(text)``."""
        ...

    def local_relation(self, table: pa.Table, schema: StructType) -> DataFrame:
        """A non-empty Arrow table as a relation whose rows Spark sees."""
        ...

    def empty_frame(self, schema: StructType) -> DataFrame:
        """No rows of ``schema``, as a relation Spark knows to be empty."""
        ...

    def estimated_bytes(self, df: DataFrame) -> int:
        """Spark's own size estimate of the plan, without running it."""
        ...

    def deterministic(self, df: DataFrame) -> bool:
        """Whether the plan computes the same rows each time it runs."""
        ...

    def default_parallelism(self) -> int:
        """How many tasks Spark runs at once, as it sizes a stage by default."""
        ...

    def memory(self) -> SparkMemory:
        """The memory an executor's tasks share, as Spark sized it (or, where
        Spark does not tell its client, as its settings size it)."""
        ...

    def status(self) -> DriverStatus | None:
        """The driver's status, or None where Spark does not tell its client its jobs."""
        ...


_drivers: dict[int, tuple[SparkSession, Driver]] = {}


def driver_for(spark: SparkSession) -> Driver:
    """The driver access for ``spark``'s kind of session, made once per session."""
    known = _drivers.get(id(spark))
    if known is not None and known[0] is spark:
        return known[1]
    driver: Driver
    if _is_connect(spark):
        from dd_etl.spark_driver.connect import ConnectDriver

        driver = ConnectDriver(spark)
    else:
        from dd_etl.spark_driver.classic import ClassicDriver

        driver = ClassicDriver(spark)
    _drivers[id(spark)] = (spark, driver)
    return driver


def _is_connect(spark: SparkSession) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")
