"""The type two SQL values of different types are compared or combined in."""

from __future__ import annotations

from pyspark.sql.types import (
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    FractionalType,
    IntegralType,
    LongType,
    NullType,
)


def common_type(a: DataType, b: DataType) -> DataType | None:
    if a == b:
        return a
    if isinstance(a, NullType):
        return b
    if isinstance(b, NullType):
        return a
    numeric = (IntegralType, FractionalType)
    if isinstance(a, numeric) and isinstance(b, numeric):
        if isinstance(a, DecimalType) and isinstance(b, DecimalType | IntegralType):
            return a if isinstance(b, IntegralType) else None
        if isinstance(a, FractionalType | DecimalType) or isinstance(b, FractionalType):
            return (
                DoubleType() if not isinstance(a, FloatType) or not isinstance(b, FloatType) else a
            )
        return LongType()
    return None
