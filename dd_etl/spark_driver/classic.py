"""The driver in this process's JVM, reached through py4j.

Every py4j call is a round trip to the JVM, and PySpark's column API pays several
per column: one for each ``F.col``, ``alias`` and ``cast``, one for each list
element handed over, and one more when Python drops each object it created. A
small epoch of the 22 TPC-H views made about 170,000 such calls, and they were
most of its planning time. Here a list of SQL expressions crosses as one string,
split into a Java array in the JVM, so an operation costs a fixed few calls
however many columns it has (a select 2, a group-by 4); Arrow tables cross as
one file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dd_etl.spark_driver import PlanWork, StageWork, plan_metrics
from dd_etl.spark_memory import (
    DRIVER_MEMORY,
    EXECUTOR_MEMORY,
    FRACTION,
    SparkMemory,
    size_bytes,
)
from dd_etl.sql_syntax import quote

_SEPARATOR = "\x1f"
"""Joins a list's items into one string; an item holding it goes the slow way."""
_GROUP_PROPERTY = "spark.jobGroup.id"
_CALL_SITE_PROPERTY = "callSite.long"
"""Where Spark says a job's RDDs were made. Unset, Spark finds it for every RDD
by walking and formatting the thread's stack: a plan of a few hundred operators
makes as many RDDs, and at 50 views that was 4 s an epoch. The job group names
the work as well."""
_READ_ARROW = "org.apache.spark.sql.api.python.PythonSQLUtils.readArrowStreamFromFile"
_TO_DATAFRAME = "org.apache.spark.sql.api.python.PythonSQLUtils.toDataFrame"
_TO_SEQ = "org.apache.spark.api.python.PythonUtils.toSeq"
_OF_ROWS = "org.apache.spark.sql.classic.Dataset.ofRows"
_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical"
_UNION = f"{_LOGICAL}.Union"


class ClassicDriver:
    kind = "classic"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._jvm = spark._jvm
        self._memory: SparkMemory | None = None

    def select(self, df: DataFrame, exprs: Sequence[str]) -> DataFrame:
        strings = self._strings(exprs)
        if strings is None:
            return df.selectExpr(*exprs)
        return DataFrame(df._jdf.selectExpr(strings), df.sparkSession)

    def group(self, df: DataFrame, keys: Sequence[str], aggregates: Sequence[str]) -> DataFrame:
        strings = self._strings([quote(k) for k in keys[1:]])
        if not keys or not aggregates or strings is None:
            return df.groupBy(*keys).agg(*[F.expr(a) for a in aggregates])
        first, *rest = aggregates
        grouped = df._jdf.groupBy(quote(keys[0]), strings)
        return DataFrame(grouped.agg(self._expr(first), self._columns(rest)), df.sparkSession)

    def union(
        self, dfs: Sequence[DataFrame], *, by_name: bool = False, one_partition: bool = False
    ) -> DataFrame:
        if len(dfs) == 1 and not one_partition:
            return dfs[0]
        jvm = self._jvm
        plans = [df._jdf.logicalPlan() for df in dfs]
        plan = (
            plans[0]
            if len(plans) == 1
            else _member(jvm, _UNION)(_member(jvm, _TO_SEQ)(plans), by_name, False)
        )
        if one_partition:
            plan = _member(jvm, f"{_LOGICAL}.Repartition")(1, False, plan)
        return DataFrame(_member(jvm, _OF_ROWS)(self.spark._jsparkSession, plan), self.spark)

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
        """The join's logical plan built in the JVM, as ``Dataset.coalesce``,
        ``hint``, ``alias``, ``join`` and ``selectExpr`` build theirs, and analysed
        once (a ``Dataset.join`` alone is analysed twice)."""
        jvm = self._jvm
        sides = [left._jdf.logicalPlan(), right._jdf.logicalPlan()]
        if one_partition:
            sides = [_member(jvm, f"{_LOGICAL}.Repartition")(1, False, p) for p in sides]
        if hash_right:
            no_parameters = _member(jvm, _TO_SEQ)([])
            hint = _member(jvm, f"{_LOGICAL}.UnresolvedHint")
            sides[1] = hint("shuffle_hash", no_parameters, sides[1])
        if aliases is not None:
            named = _member(jvm, "org.apache.spark.sql.catalyst.AliasIdentifier")
            alias = _member(jvm, f"{_LOGICAL}.SubqueryAlias")
            unqualified = _member(jvm, _TO_SEQ)([])
            sides = [
                alias(named(name, unqualified), p) for name, p in zip(aliases, sides, strict=True)
            ]
        session = self.spark._jsparkSession
        parser = session.sessionState().sqlParser()
        parsed = parser.parseExpression(condition)
        join = _member(jvm, f"{_LOGICAL}.Join")(
            *sides,
            _member(jvm, "org.apache.spark.sql.catalyst.plans.JoinType.apply")(how),
            _member(jvm, "scala.Some")(parsed),
            _member(jvm, f"{_LOGICAL}.JoinHint.NONE")(),
        )
        if select is not None:
            # the select list as the parser makes it, over a placeholder table
            listed = parser.parsePlan(f"SELECT {', '.join(select)} FROM t").projectList()
            join = _member(jvm, f"{_LOGICAL}.Project")(listed, join)
        return DataFrame(_member(jvm, _OF_ROWS)(session, join), self.spark)

    def expr(self, text: str) -> Column:
        return Column(self._expr(text))

    def local_relation(self, table: pa.Table, schema: StructType) -> DataFrame:
        """What ``createDataFrame`` does with an Arrow table, less its configuration
        look-ups: an Arrow stream in a file the JVM reads, in 2 JVM calls instead
        of about 40."""
        spark = self.spark
        if spark.sparkContext._encryption_enabled:  # data must then cross by socket
            return spark.createDataFrame(table, schema)
        with (
            tempfile.NamedTemporaryFile(suffix=".arrows", delete=False) as out,
            pa.ipc.new_stream(out, table.schema) as stream,
        ):
            stream.write_table(table)
        try:
            batches = _member(self._jvm, _READ_ARROW)(out.name)
            to_frame = _member(self._jvm, _TO_DATAFRAME)
            jdf = to_frame(batches, schema.json(), spark._jsparkSession)
        finally:
            os.unlink(out.name)
        return DataFrame(jdf, spark)

    def empty_frame(self, schema: StructType) -> DataFrame:
        """A local relation of no rows made in the JVM, with no Arrow stream to
        write and read."""
        session = self.spark._jsparkSession
        rows = _member(self._jvm, "java.util.ArrayList")()
        jdf = session.createDataFrame(rows, session.parseDataType(schema.json()))
        return DataFrame(jdf, self.spark)

    def estimated_bytes(self, df: DataFrame) -> int:
        stats = df._jdf.queryExecution().optimizedPlan().stats()
        try:
            return int(str(stats.sizeInBytes()))
        except ValueError:  # estimates of long join chains overflow Python's int parsing
            return sys.maxsize

    def deterministic(self, df: DataFrame) -> bool:
        return bool(df._jdf.queryExecution().analyzed().deterministic())

    def default_parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def memory(self) -> SparkMemory:
        """On local Spark the executor is this JVM: its heap and page size as they
        are; elsewhere as the executors' settings size them."""
        if self._memory is None:
            context = self.spark.sparkContext
            conf = context.getConf()
            fraction = conf.get(FRACTION)
            if (context.master or "local").startswith("local"):
                heap = int(_member(self._jvm, "java.lang.Runtime").getRuntime().maxMemory())
                shown = conf.get(DRIVER_MEMORY, "1g") or "1g"
                tasks = self.default_parallelism()
                sized = SparkMemory.of_heap(heap, tasks, DRIVER_MEMORY, shown, fraction)
                env = _member(self._jvm, "org.apache.spark.SparkEnv").get()
                self._memory = replace(sized, page_bytes=int(env.memoryManager().pageSizeBytes()))
            else:
                shown = conf.get(EXECUTOR_MEMORY, "1g") or "1g"
                heap = size_bytes(shown) or 1 << 30
                cores = int(conf.get("spark.executor.cores", "1") or "1")
                self._memory = SparkMemory.of_heap(heap, cores, EXECUTOR_MEMORY, shown, fraction)
        return self._memory

    def status(self) -> ClassicStatus:
        return ClassicStatus(self.spark)

    def _strings(self, items: Sequence[str]) -> Any | None:
        """``items`` as a Java ``String[]``, or None if one holds the separator."""
        if any(_SEPARATOR in item for item in items):
            return None
        if not items:
            return _member(self._jvm, "org.apache.commons.lang3.ArrayUtils.EMPTY_STRING_ARRAY")
        split = _member(
            self._jvm,
            "org.apache.commons.lang3.StringUtils.splitByWholeSeparatorPreserveAllTokens",
        )
        return split(_SEPARATOR.join(items), _SEPARATOR)

    def _expr(self, text: str) -> Any:
        return _member(self._jvm, "org.apache.spark.sql.functions.expr")(text)

    def _columns(self, exprs: Sequence[str]) -> Any:
        """SQL expressions as a Java ``Column[]``."""
        gateway = self.spark.sparkContext._gateway
        assert gateway is not None
        if not exprs:
            return _no_columns(self._jvm, gateway)
        array = gateway.new_array(_member(self._jvm, "org.apache.spark.sql.Column"), len(exprs))
        for i, e in enumerate(exprs):
            array[i] = self._expr(e)
        return array


class ClassicStatus:
    """Spark's status tracker and status store, job groups set as local properties."""

    def __init__(self, spark: SparkSession) -> None:
        self._context = spark.sparkContext
        self._tracker = spark.sparkContext._jsc.statusTracker()
        self._store = spark.sparkContext._jsc.sc().statusStore()
        jvm = spark._jvm
        assert jvm is not None
        self._array_text = jvm.java.util.Arrays.toString
        compilation = jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
        self._compilation = (
            compilation if compilation.isCompilationTimeMonitoringSupported() else None
        )

    def labelled(self) -> str | None:
        return self._context.getLocalProperty(_GROUP_PROPERTY)

    def label(self, group: str | None) -> None:
        self._context.setLocalProperty(_GROUP_PROPERTY, group)  # type: ignore[arg-type]
        self._context.setLocalProperty(_CALL_SITE_PROPERTY, group)  # type: ignore[arg-type]

    def job_ids(self, group: str | None) -> list[int]:
        # as one string: PySpark's list of a Java array costs a JVM call per element
        return self._ints(self._tracker.getJobIdsForGroup(group))

    def stages(self, job: int) -> list[int]:
        info = self._tracker.getJobInfo(job)
        return [] if info is None else self._ints(info.stageIds())

    def settled(self) -> None:
        self._context._jsc.sc().listenerBus().waitUntilEmpty()

    def stage_work(self, stage: int) -> StageWork | None:
        try:
            data = self._store.lastStageAttempt(stage)
        except Exception:  # py4j's error for a stage the store dropped
            return None
        return StageWork(
            tasks=int(data.numCompleteTasks()),
            task_seconds=int(data.executorRunTime()) / 1e3,
            input_bytes=int(data.inputBytes()),
            shuffle_read_bytes=int(data.shuffleReadBytes()),
            shuffle_write_bytes=int(data.shuffleWriteBytes()),
        )

    def plan_parts(self, df: DataFrame, parts: int) -> tuple[PlanWork, list[PlanWork]] | None:
        return plan_metrics.parts_of(df._jdf.queryExecution().executedPlan(), parts)

    def compiled_ms(self) -> int | None:
        return (
            None if self._compilation is None else int(self._compilation.getTotalCompilationTime())
        )

    def _ints(self, array: Any) -> list[int]:
        return [int(x) for x in str(self._array_text(array)).strip("[]").split(",") if x.strip()]


@lru_cache(maxsize=64)
def _member(jvm: Any, name: str) -> Any:
    """A JVM class, static method or constant by its full name, looked up once per
    JVM: each look-up is a round trip."""
    found = jvm
    for part in name.split("."):
        found = getattr(found, part)
    return found


@lru_cache(maxsize=16)
def _no_columns(jvm: Any, gateway: Any) -> Any:
    return gateway.new_array(_member(jvm, "org.apache.spark.sql.Column"), 0)
