"""The two sources of the runtime tests: trips ``(id, pc, fare, tags)`` keyed by id, and
zones ``(pc, label)``; rows as tuples, with list values made hashable to count them."""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

TRIPS = StructType(
    [
        StructField("id", LongType()),
        StructField("pc", LongType()),
        StructField("fare", DoubleType()),
        StructField("tags", ArrayType(StringType())),
    ]
)
ZONES = StructType([StructField("pc", LongType()), StructField("label", StringType())])

Row = tuple[Any, ...]


def hashable(row: Row) -> Row:
    return tuple(tuple(v) if isinstance(v, list) else v for v in row)
