"""What a pipeline needs from a source: its schema, and its changes since a position.

A *position* says how much of the source an epoch covers (a Delta version, the
files read so far). It is committed with the source's append, in the same Delta
commit, so an epoch's data and the record of what it covers never disagree: a
run that crashes before the commit re-reads from the old position, one that
crashes after it finds the epoch already appended.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dd_etl.trace.columns import DIFF
from dd_etl.trace.delta_trace import DeltaTrace

POSITION_META = "source.position"
"""Trace meta key holding the JSON position the source's latest epoch covers."""

Position = dict[str, Any]


@dataclass(frozen=True)
class Capture:
    """The changes of one source for one epoch (data columns + ``_diff``) and the
    position they bring the source to."""

    changes: DataFrame | None  # None: nothing changed
    position: Position
    summary: str  # for humans: "version 3 → 5", "2 new files"
    locate: Callable[[], str | None] | None = None
    """Where a value of the changes that cannot be cast to its column's type lies
    (``SourceReader.bad_value`` of the data read): asked once taking the changes in
    failed, since Spark's error names the value alone."""


class SourceReader(Protocol):
    name: str

    def schema(self) -> StructType:
        """The source's data columns, read from the data (or the declared schema)."""
        ...

    def capture(
        self,
        position: Position | None,
        trace: DeltaTrace,
        schema: StructType,
        limit: int | None = None,
    ) -> Capture:
        """The changes since ``position`` (None: nothing read yet), as updates of
        ``schema``; ``trace`` holds everything taken in so far. ``limit`` takes in at
        most that many new files or table versions, oldest first (loading history in
        epoch-sized chunks)."""
        ...

    def snapshot(self, position: Position, schema: StructType) -> DataFrame | None:
        """The source's full contents as of ``position`` (data + ``_diff``), to verify
        the trace against; None if that state can no longer be read."""
        ...

    def lag(self, position: Position | None) -> str:
        """How far the source is ahead of ``position``, cheaply (no Spark)."""
        ...

    def signature(self) -> str:
        """A cheap token (no Spark) that changes whenever the source has new data:
        what sensors compare to decide that a tick is due."""
        ...

    def caught_up(self, position: Position | None) -> bool:
        """Whether ``position`` covers everything the source holds now (no Spark)."""
        ...

    def restated(self, position: Position) -> Position:
        """``position`` with the data it covers read again as it is now: the files
        already taken in with their current stamps (corrected in place), or the same
        table version. New data is left for the next ordinary capture."""
        ...

    def rewritten(self, position: Position) -> list[str]:
        """What of the data ``position`` covers was rewritten in place since (files,
        by name; no Spark): a capture refuses to go on past it, and ``restated``
        records it as read now. The same decision for both, so that a restatement
        always lets the next run go on."""
        ...

    def bad_value(self, position: Position, schema: StructType) -> str | None:
        """Where a value of the data ``position`` covers lies that cannot be cast to
        its column's type in ``schema``: the file as the pipeline names it, the line
        (CSV), the column and the value. None if there is none, or the source cannot
        tell. Asked when taking data in failed (a Spark job)."""
        ...


def read_position(trace: DeltaTrace) -> Position | None:
    text = trace.state.meta_map.get(POSITION_META)
    return None if not text else dict(json.loads(text))


def encode_position(position: Position) -> dict[str, str]:
    return {POSITION_META: json.dumps(position, sort_keys=True, separators=(",", ":"))}


def conform(df: DataFrame, schema: StructType, diff: Column | None = None) -> DataFrame:
    """``df`` with exactly ``schema``'s columns, in order, cast to its types, plus ``_diff``."""
    cols = [F.col(f"`{f.name}`").cast(f.dataType).alias(f.name) for f in schema.fields]
    return df.select(*cols, (diff if diff is not None else F.lit(1)).cast("long").alias(DIFF))


def difference(
    snapshot: DataFrame, trace: DeltaTrace, schema: StructType, where: Column | None = None
) -> DataFrame:
    """The changes that turn what ``trace`` holds into ``snapshot`` (both data + ``_diff``):
    snapshot differencing, for sources without a change feed; ``where`` limits both
    sides to the rows it selects (a restated partition)."""
    names = schema.fieldNames()
    if where is not None:
        snapshot = snapshot.where(where)
    if trace.state.records == 0:
        return snapshot.select(*names, DIFF)
    held = trace.read_at(None)
    if where is not None:
        held = held.where(where)
    current = held.select(*names, (-F.col(DIFF)).alias(DIFF))
    both = snapshot.select(*names, DIFF).unionByName(current)
    return both.groupBy(*names).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
