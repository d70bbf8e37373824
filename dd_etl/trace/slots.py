"""The rows of several DataFrames of different layouts as one: each column in a
slot of its own type, each row tagged with the index of the DataFrame it came
from (``PART``).

One Spark job can then compute batches of several traces at once, where each
would be a job of its own, of fixed cost. No column is converted: the union is
as wide as the widest of them, plus a slot for each type only some of them have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StructType

from dd_etl import sql_text
from dd_etl.spark_driver import driver_for
from dd_etl.sql_text import quote

PART = "__part"


def slot(k: int) -> str:
    return f"__slot_{k}"


@dataclass(frozen=True)
class Projected:
    """The rows of ``frame`` as the SQL ``exprs`` compute them, one column of
    ``schema`` each: a projection the union's own select makes, where a select of
    its own would be one more DataFrame for Spark to analyse (and its schema one
    more to fetch)."""

    frame: DataFrame
    exprs: tuple[str, ...]
    schema: StructType

    @staticmethod
    def of(df: DataFrame | Projected) -> Projected:
        if isinstance(df, Projected):
            return df
        return Projected(df, tuple(quote(c) for c in df.columns), df.schema)

    def over(self, frame: DataFrame) -> Projected:
        """The projection over ``frame``, of the same columns (``frame`` limited,
        say, or in one partition)."""
        return Projected(frame, self.exprs, self.schema)

    def selected(self) -> DataFrame:
        """The projection as a select of its own."""
        names = map(quote, self.schema.fieldNames())
        aliased = [e if e == n else f"{e} AS {n}" for e, n in zip(self.exprs, names, strict=True)]
        return sql_text.select(self.frame, aliased)


def tagged_union(
    dfs: Sequence[DataFrame | Projected],
    shared: Sequence[str] = (),
    tasks: Sequence[int] | None = None,
) -> tuple[DataFrame, list[list[int]]]:
    """``dfs`` as one DataFrame of ``PART``, the ``shared`` columns (which each has,
    of one type: what the union is ordered by) and slots, and the slot of each
    column of each of them, in its order. With ``tasks``, consecutive ones (as
    many as each says) are one partition, computed by one task."""
    projected = [Projected.of(df) for df in dfs]
    slots, placement = _slots([p.schema for p in projected])
    parts = []
    for i, (p, placed) in enumerate(zip(projected, placement, strict=True)):
        expr_in = dict(zip(placed, p.exprs, strict=True))
        filled = [expr_in.get(k) or sql_text.cast("NULL", t) for k, t in enumerate(slots)]
        exprs = [
            f"{i} AS {PART}",
            *map(quote, shared),
            *[f"{e} AS {slot(k)}" for k, e in enumerate(filled)],
        ]
        parts.append(sql_text.select(p.frame, exprs))
    driver = driver_for(projected[0].frame.sparkSession)
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
