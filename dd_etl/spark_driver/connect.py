"""The driver behind a Spark Connect server: reached only through its plans.

A Connect client builds plans in Python and sends them whole, so the DataFrame
API is as cheap as anything (no round trip per column); Arrow tables travel in
the plan. What a classic session reads off the JVM, a Connect client reads off
the plan Spark explains (one analysis round trip, no job): the optimizer's size
estimate, the non-deterministic functions a plan calls, the tasks its ``range``
is split into. Spark does not tell a Connect client the jobs it ran.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dd_etl.spark_memory import (
    DRIVER_MEMORY,
    EXECUTOR_MEMORY,
    FRACTION,
    SparkMemory,
    size_bytes,
)

_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_SIZE = re.compile(r"Statistics\(sizeInBytes=([0-9.E+]+) (B|KiB|MiB|GiB|TiB|PiB|EiB)")
_SPLITS = re.compile(r"Range \(.*splits=(\d+)\)")
_UNKNOWN = 2**63 - 1
NOT_DETERMINISTIC = (
    "rand",
    "randn",
    "random",
    "randstr",
    "uniform",
    "uuid",
    "shuffle",
    "monotonically_increasing_id",
    "spark_partition_id",
    "input_file_name",
    "input_file_block_start",
    "input_file_block_length",
)
"""Spark's functions that are not deterministic, as an analyzed plan names them; a
Python function marked non-deterministic is not among them."""
_CALLS = re.compile(r"(?<![\w`])(" + "|".join(NOT_DETERMINISTIC) + r")\(")


class ConnectDriver:
    kind = "connect"

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def select(self, df: DataFrame, exprs: Sequence[str]) -> DataFrame:
        return df.selectExpr(*exprs)

    def group(self, df: DataFrame, keys: Sequence[str], aggregates: Sequence[str]) -> DataFrame:
        return df.groupBy(*keys).agg(*[F.expr(a) for a in aggregates])

    def union(
        self, dfs: Sequence[DataFrame], *, by_name: bool = False, one_partition: bool = False
    ) -> DataFrame:
        add = DataFrame.unionByName if by_name else DataFrame.union
        union = functools.reduce(add, dfs)  # a plan sent whole, analysed once
        return union.coalesce(1) if one_partition else union

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
        if one_partition:
            left, right = left.coalesce(1), right.coalesce(1)
        if hash_right:
            right = right.hint("shuffle_hash")
        if aliases is not None:
            left, right = left.alias(aliases[0]), right.alias(aliases[1])
        joined = left.join(right, F.expr(condition), how)
        # a plan sent whole, analysed once
        return joined if select is None else joined.selectExpr(*select)

    def expr(self, text: str) -> Column:
        return F.expr(text)

    def local_relation(self, table: pa.Table, schema: StructType) -> DataFrame:
        return self.spark.createDataFrame(table, schema)

    def empty_frame(self, schema: StructType) -> DataFrame:
        return self.spark.createDataFrame([], schema)

    def estimated_bytes(self, df: DataFrame) -> int:
        return size_in_bytes(_explained(df, "cost"))

    def deterministic(self, df: DataFrame) -> bool:
        return not calls_not_deterministic(_explained(df, "extended"))

    def default_parallelism(self) -> int:
        """The splits of a ``range`` with none asked for: Spark's default parallelism."""
        return range_splits(_explained(self.spark.range(1), "simple"))

    def memory(self) -> SparkMemory:
        """As the server's settings size its executors' memory, which a client can
        read (its heap it cannot): the driver's on a local server."""
        master = self.spark.conf.get("spark.master", "local") or "local"
        setting = DRIVER_MEMORY if master.startswith("local") else EXECUTOR_MEMORY
        shown = self.spark.conf.get(setting, "1g") or "1g"
        heap = size_bytes(shown) or 1 << 30
        fraction = self.spark.conf.get(FRACTION, None)
        return SparkMemory.of_heap(heap, self.default_parallelism(), setting, shown, fraction)

    def status(self) -> None:
        return None


def size_in_bytes(explained: str) -> int:
    """The optimized plan's root estimate in an explanation of mode ``cost``, as
    Spark prints it (3 significant digits: enough for the thresholds it is
    compared with); the largest int where it says none or too large to hold."""
    found = _SIZE.search(explained)
    if found is None or found.group(2) == "EiB":
        return _UNKNOWN
    value, unit = found.groups()
    return min(int(float(value) * _UNITS[unit]), _UNKNOWN)


def calls_not_deterministic(explained: str) -> bool:
    """Whether the parsed or analyzed plan of an ``extended`` explanation calls one
    of ``NOT_DETERMINISTIC``."""
    return _CALLS.search(explained.split("== Optimized Logical Plan ==")[0]) is not None


def range_splits(explained: str) -> int:
    found = _SPLITS.search(explained)
    return int(found.group(1)) if found else 1


def _explained(df: DataFrame, mode: str) -> str:
    explain: Any = df._explain_string
    return str(explain(mode=mode))
