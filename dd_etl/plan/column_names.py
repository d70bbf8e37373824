"""Columns a plan names or computes simply, made without Spark's JVM.

Building a pipeline's plans makes columns thousands of times (every SQL view
renames its inputs' columns and its output's, pads the sides of a union, buckets
each MIN/MAX by a hash), and a PySpark column is several round trips to the JVM
to make and one more each time a node id prints it: at 200 views, about half the
time opening the pipeline took. Such a column is SQL text instead
(``ColumnText``), which operators hand to Spark with the rest of their
expressions (``sql_text``), and which prints in a node id as Spark prints the
column it stands for, so plan ids, which name traces, stay what they were.
"""

from __future__ import annotations

from typing import Self

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dd_etl.sql_syntax import cast, quote

_ATOMIC = (
    T.BinaryType,
    T.BooleanType,
    T.ByteType,
    T.DateType,
    T.DecimalType,
    T.DoubleType,
    T.FloatType,
    T.IntegerType,
    T.LongType,
    T.ShortType,
    T.StringType,
    T.TimestampNTZType,
    T.TimestampType,
)
"""Types whose name Spark prints in a cast as their simple string in capitals."""
BUCKET_MASK = 0xFFFFFFFF
"""A MIN/MAX or top-k bucket is a 32-bit prefix of the rows' hash."""


class ColumnText(str):
    """SQL text standing for a Spark column, and what Spark prints of that column."""

    printed: str

    def __new__(cls, sql: str, printed: str) -> Self:
        text = super().__new__(cls, sql)
        text.printed = printed
        return text

    def __reduce__(self) -> tuple[type[ColumnText], tuple[str, ...]]:
        # a copy or a pickle makes it again from what made it
        return (ColumnText, (str(self), self.printed))

    @property
    def fingerprint(self) -> str:
        """What ``str()`` of the Spark column it stands for is."""
        return f"Column<'{self.printed}'>"


class ColumnName(ColumnText):
    """A column by its name: SQL text (the quoted name) that keeps the name."""

    name: str

    def __new__(cls, name: str) -> Self:
        named = super().__new__(cls, quote(name), name)
        named.name = name
        return named

    def __reduce__(self) -> tuple[type[ColumnText], tuple[str, ...]]:
        return (ColumnName, (self.name,))


def _as_is(name: str) -> bool:
    """Whether Spark takes ``name`` as it is: a dot (a struct's field, to Spark) or
    a backtick (quoting) is Spark's to parse."""
    return bool(name) and "." not in name and "`" not in name


def column(name: str) -> ColumnName | Column:
    """The column ``name``, as ``F.col(name)`` reads it."""
    return ColumnName(name) if _as_is(name) else F.col(name)


def is_not_null(name: str) -> ColumnText | Column:
    """``F.col(name).isNotNull()``."""
    if not _as_is(name):
        return F.col(name).isNotNull()
    return ColumnText(f"{quote(name)} IS NOT NULL", f"isNotNull({name})")


def renamed(name: str, alias: str) -> ColumnText | Column:
    """``F.col(name).alias(alias)``."""
    if not (_as_is(name) and _as_is(alias)):
        return F.col(name).alias(alias)
    return ColumnText(f"{quote(name)} AS {quote(alias)}", f"{name} AS {alias}")


def hash_bucket(names: list[str], shift: int = 0) -> ColumnText | Column:
    """The bucket of a row by the 32 low bits of the ``xxhash64`` of ``names``,
    shifted right by ``shift`` bits, as a BIGINT: what ``F.xxhash64(*names)
    .bitwiseAND(0xFFFFFFFF)``, then ``F.shiftrightunsigned`` if ``shift``, then
    ``.cast("long")`` make."""
    if not all(_as_is(n) for n in names):
        spark_bucket = F.xxhash64(*names).bitwiseAND(BUCKET_MASK)
        if shift:
            spark_bucket = F.shiftrightunsigned(spark_bucket, shift)
        return spark_bucket.cast("long")
    sql = f"(xxhash64({', '.join(quote(n) for n in names)}) & {BUCKET_MASK})"
    printed = f"&(xxhash64({', '.join(names)}), {BUCKET_MASK}L)"
    if shift:
        sql = f"shiftrightunsigned({sql}, {shift})"
        printed = f"shiftrightunsigned({printed}, {shift})"
    return ColumnText(f"CAST({sql} AS BIGINT)", f"CAST({printed} AS BIGINT)")


def shifted_right(name: str, bits: int) -> ColumnText | Column:
    """``F.shiftrightunsigned(name, bits)``."""
    if not _as_is(name):
        return F.shiftrightunsigned(name, bits)
    return ColumnText(
        f"shiftrightunsigned({quote(name)}, {bits})", f"shiftrightunsigned({name}, {bits})"
    )


def cast_literal(
    value: int | None, data_type: T.DataType, alias: str | None = None
) -> ColumnText | Column:
    """``F.lit(value).cast(data_type)``, then ``.alias(alias)`` if given: a NULL or an
    integer of the type."""
    if not isinstance(data_type, _ATOMIC) or (alias is not None and not _as_is(alias)):
        made = F.lit(value).cast(data_type)
        return made if alias is None else made.alias(alias)
    literal = "NULL" if value is None else str(int(value))
    sql = cast(literal, data_type)
    printed = f"CAST({literal} AS {data_type.simpleString().upper()})"
    if alias is not None:
        sql, printed = f"{sql} AS {quote(alias)}", f"{printed} AS {alias}"
    return ColumnText(sql, printed)
