"""Merge steps of few records, made in the driver with pyarrow.

Back-pressure makes an append pay merge work as soon as its trace holds more
batches than its spine should, and the traces that get there first are the
smallest: a view of a dozen rows takes a batch per epoch. A Spark job for each
step of such a merge cost more than the run's own work (three or four extra jobs
an epoch in a long-running pipeline, against six). Up to ``DRIVER_MERGED_RECORDS``
the driver reads the inputs (most often from ``file_cache``), advances their
times, consolidates and sorts them, and writes the merged file itself.

The result is the batch Spark would write: times advanced by ``advance_by``,
equal updates summed as Spark's grouping finds them equal (``-0.0`` and ``0.0``
are one value, so are all NaNs, and Spark keeps the normalised one), zeros
dropped, rows ordered by key hash. Columns of nested types are grouped by Spark
alone: the driver declines them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from dd_etl.arrow_schema import arrow_schema
from dd_etl.lake import Location
from dd_etl.lattice import Antichain
from dd_etl.trace import arrow_files, spark_files
from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import DIFF, KEY_HASH, time_columns
from dd_etl.trace.spine import HashRange
from dd_etl.trace.state import TraceState

DRIVER_MERGED_RECORDS = 20_000
"""A merge step reading at most this many records is made in the driver."""


def merged(
    root: Location,
    state: TraceState,
    inputs: Sequence[DataFile],
    hashes: HashRange,
    since: Antichain,
    at_most: int = DRIVER_MERGED_RECORDS,
) -> pa.Table | None:
    """The merged rows of ``inputs`` whose key hash is in ``hashes``, times advanced
    by ``since``, in the stored layout; None when Spark should make them (more
    than ``at_most`` records, or a column the driver cannot group by)."""
    if sum(f.records for f in inputs) > at_most:
        return None
    schema = arrow_schema(spark_files.stored_schema(state))
    if not groupable(schema):
        return None
    table = arrow_files.read_table(root, state, inputs)
    if table is None:
        return None
    hashed = table.column(KEY_HASH)
    keep = pc.greater_equal(hashed, hashes.start)
    if hashes.end < 1 << 63:
        keep = pc.and_(keep, pc.less(hashed, hashes.end))
    table = advanced(table.filter(keep), state.dims, since)
    return consolidated(table).cast(schema)


def advanced(table: pa.Table, dims: int, since: Antichain) -> pa.Table:
    """Every time replaced by ``advance_by(time, since)``: per coordinate, the least
    over the frontier's elements of the larger of the time and the element."""
    if since.is_empty():
        return table
    for i, column in enumerate(time_columns(dims)):
        times = table.column(column)
        bounds = [pc.max_element_wise(times, f[i]) for f in since.elements]
        least = bounds[0] if len(bounds) == 1 else pc.min_element_wise(*bounds)
        table = table.set_column(table.schema.get_field_index(column), column, least)
    return table


def groupable(schema: pa.Schema) -> bool:
    """Whether the driver can group rows of ``schema`` (Arrow groups no nested type)."""
    return not any(pa.types.is_nested(f.type) for f in schema)


def laid_out(table: pa.Table, distinct: bool = False) -> pa.Table:
    """Stored updates as a batch file holds them (``consolidated``); ``distinct``
    ones, no two with the same data and time, only ordered by key hash."""
    if distinct:
        return table.sort_by(KEY_HASH)
    return consolidated(table).cast(table.schema)


def consolidated(table: pa.Table) -> pa.Table:
    """Equal updates summed, zeros dropped, ordered by key hash: the stored layout."""
    return summed(table).sort_by(KEY_HASH)


def summed(table: pa.Table) -> pa.Table:
    """Equal rows as one, grouped as Spark groups them: updates with their diffs
    summed and zeros dropped, or, without a diff column, each distinct row once.
    The columns keep their order; the rows have none."""
    group = [c for c in table.column_names if c != DIFF]
    for name in group:
        column = table.column(name)
        if pa.types.is_floating(column.type):
            table = table.set_column(table.schema.get_field_index(name), name, _normalised(column))
    if DIFF not in table.column_names:
        return table.group_by(group, use_threads=False).aggregate([]).select(group)
    out = table.group_by(group, use_threads=False).aggregate([(DIFF, "sum")])
    out = out.rename_columns([DIFF if c == f"{DIFF}_sum" else c for c in out.column_names])
    return out.filter(pc.not_equal(out.column(DIFF), 0)).select(table.column_names)


def _normalised(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """``-0.0`` as ``0.0`` and every NaN as one NaN, as Spark groups them."""
    zero = pa.scalar(0.0, values.type)
    nan = pa.scalar(float("nan"), values.type)
    values = pc.if_else(pc.equal(values, zero), zero, values)
    return pc.if_else(pc.is_nan(values), nan, values)
