"""The keys a round looks up in arrangements, computed once.

A small change touches few keys, and every lookup of them into an arrangement
is a semi-join. Spark plans a semi-join against a checkpointed frame, whose
size it cannot see, as two shuffles and a sort, and recomputes the keys' own
``distinct`` inside every plan that uses them. So keys are collected once when
they are not too many. A few become a literal ``IN`` filter, which Spark pushes
into every scan: no join at all, and an empty key set prunes the lookup at
planning time. More become a small frame joined by broadcast, so the
arrangement is not shuffled. Only a great many keys
stay a plan joined the general way.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

from dd_etl.operators.reduce import null_safe_join

LITERAL_KEYS = 64
"""Up to this many keys are looked up by a literal filter (built value by value)."""
COLLECTED_KEYS = 10_000
"""Up to this many keys are collected and broadcast; more stay a Spark plan."""
SCANNED_ROWS = 4
"""Key rows (with repeats) read per collected key allowed before giving up."""


@dataclass(frozen=True)
class KeySet:
    """Distinct keys: ``frame`` holds them for Spark; ``rows`` too when collected."""

    schema: StructType
    frame: DataFrame
    rows: tuple[tuple[Any, ...], ...] | None = None

    @staticmethod
    def of(keys: DataFrame) -> KeySet:
        """Collect ``keys`` (one row per key or with repeats) if they are not too
        many: one Spark job without a shuffle."""
        if not keys.columns:
            return KeySet(keys.schema, keys)  # one group, always looked up whole
        scanned = SCANNED_ROWS * COLLECTED_KEYS
        rows = keys.limit(scanned).collect()
        distinct = tuple(dict.fromkeys(tuple(r) for r in rows))
        if len(rows) == scanned or len(distinct) > COLLECTED_KEYS:
            return KeySet(keys.schema, keys.distinct())
        collected = keys.sparkSession.createDataFrame(list(distinct), keys.schema)
        return KeySet(keys.schema, collected, distinct)

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    def renamed(self, names: Sequence[str]) -> KeySet:
        """The same keys under other column names (a join's other side)."""
        pairs = zip(names, self.schema, strict=True)
        schema = StructType([StructField(n, f.dataType, f.nullable) for n, f in pairs])
        return KeySet(schema, self.frame.toDF(*names), self.rows)

    def select(self, df: DataFrame) -> DataFrame:
        """The rows of ``df`` whose key columns (by name) hold one of the keys;
        NULL matches NULL, as grouping keys may be NULL."""
        if not self.columns:
            return df  # one group: every row
        if self.rows is None:
            return null_safe_join(df, self.frame, self.columns, "left_semi")
        if len(self.rows) <= LITERAL_KEYS:
            return df.where(_among(self.schema, self.rows))
        # A frame made from Python rows is an RDD to Spark, of unknown size: say so.
        return null_safe_join(df, F.broadcast(self.frame), self.columns, "left_semi", False)


def _among(schema: StructType, rows: Sequence[tuple[Any, ...]]) -> Column:
    if not rows:
        return F.lit(False)
    names = schema.fieldNames()
    types = [f.dataType for f in schema]
    plain = [r for r in rows if None not in r]
    terms: list[Column] = []
    if plain and len(names) == 1:
        terms.append(F.col(names[0]).isin([_lit(r[0], types[0]) for r in plain]))
    elif plain:
        key = F.struct(*[F.col(c) for c in names])
        terms.append(key.isin([_struct(names, types, r) for r in plain]))
    for r in rows:
        if None in r:
            cells = zip(names, types, r, strict=True)
            equal = [F.col(c).eqNullSafe(_lit(v, t)) for c, t, v in cells]
            terms.append(functools.reduce(lambda a, b: a & b, equal))
    return functools.reduce(lambda a, b: a | b, terms)


def _lit(value: Any, kind: DataType) -> Column:
    return F.lit(value).cast(kind)


def _struct(names: Sequence[str], types: Sequence[DataType], row: tuple[Any, ...]) -> Column:
    return F.struct(*[_lit(v, t).alias(c) for c, t, v in zip(names, types, row, strict=True)])
