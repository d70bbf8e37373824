"""The rows of several DataFrames of different layouts as one: each column in a
slot of its own type, each row tagged with the index of the DataFrame it came
from (``PART``).

One Spark job can then compute batches of several traces at once, where each
would be a job of its own, of fixed cost. No column is converted: the union is
as wide as the widest of them, plus a slot for each type only some of them have.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StructType

from dd_etl import sql_text
from dd_etl.spark_driver import driver_for
from dd_etl.sql_text import quote

PART = "__part"


def slot(k: int) -> str:
    return f"__slot_{k}"


def tagged_union(
    dfs: Sequence[DataFrame], shared: Sequence[str] = (), tasks: Sequence[int] | None = None
) -> tuple[DataFrame, list[list[int]]]:
    """``dfs`` as one DataFrame of ``PART``, the ``shared`` columns (which each has,
    of one type: what the union is ordered by) and slots, and the slot of each
    column of each of them, in its order. With ``tasks``, consecutive ones (as
    many as each says) are one partition, computed by one task."""
    slots, placement = _slots([df.schema for df in dfs])
    parts = []
    for i, (df, placed) in enumerate(zip(dfs, placement, strict=True)):
        column_in = {k: name for name, k in zip(df.columns, placed, strict=True)}
        filled = [
            quote(column_in[k]) if k in column_in else sql_text.cast("NULL", t)
            for k, t in enumerate(slots)
        ]
        exprs = [
            f"{i} AS {PART}",
            *map(quote, shared),
            *[f"{e} AS {slot(k)}" for k, e in enumerate(filled)],
        ]
        parts.append(sql_text.select(df, exprs))
    driver = driver_for(dfs[0].sparkSession)
    if tasks is None:
        return driver.union(parts), placement
    together = []
    start = 0
    for count in tasks:
        together.append(driver.union(parts[start : start + count]).coalesce(1))
        start += count
    return driver.union(together), placement


def _slots(schemas: Sequence[StructType]) -> tuple[list[DataType], list[list[int]]]:
    """Slots for the columns of every schema, and where each schema's columns go:
    the n-th column of a type goes to the n-th slot of that type, so schemas
    share slots, and there are as many of a type as the schema with most has."""
    slots: list[DataType] = []
    by_type: dict[DataType, list[int]] = {}
    placement = []
    for schema in schemas:
        used: dict[DataType, int] = {}
        placed = []
        for field in schema.fields:
            n = used.get(field.dataType, 0)
            used[field.dataType] = n + 1
            of_type = by_type.setdefault(field.dataType, [])
            if n == len(of_type):
                of_type.append(len(slots))
                slots.append(field.dataType)
            placed.append(of_type[n])
        placement.append(placed)
    return slots, placement
