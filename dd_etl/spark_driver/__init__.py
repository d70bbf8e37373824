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
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from dd_etl.spark_memory import SparkMemory


class DriverStatus(Protocol):
    """What the driver tells of its work: Spark jobs labelled by group, as a run's
    profile counts them per trace, and its JVM's compiling."""

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

    def input_bytes(self, stage: int) -> int:
        """What the stage's tasks read from files (0 once Spark forgot the stage)."""
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
