"""Spark schemas as Arrow schemas, for the files and logs written outside Spark.

A Spark ``TIMESTAMP`` is an instant, which Arrow, Parquet and Delta spell as a
timestamp adjusted to UTC: the conversion needs that zone named, and any zone
would do (it labels the values, it does not shift them).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")
