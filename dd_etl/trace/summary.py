"""A collection's size and a few of its rows, read in the driver.

A view's materialization shows both every tick. Asked of Spark, each was a job
that read and consolidated the whole view: two jobs per view per tick, whatever
the size of the change. The size is the sum of the stored diffs, one column of
the files; the rows are those of the smallest key hashes, which the files'
statistics locate, consolidated like a driver merge (``driver_merge``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from dd_etl.arrow_schema import arrow_schema
from dd_etl.lake import Location
from dd_etl.trace import driver_merge, file_cache, spark_files
from dd_etl.trace.arrow_files import DRIVER_KEPT_RECORDS
from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import DIFF, KEY_HASH
from dd_etl.trace.file_stats import hash_bounds
from dd_etl.trace.spine import HASH_SPACE
from dd_etl.trace.state import TraceState

LOWEST_HASH = -(1 << 63)


def size(root: Location, files: Sequence[DataFile]) -> int:
    """The number of rows of the collection the files hold, every time accumulated
    (bag semantics): the sum of their diffs."""
    total = 0
    for file in files:
        diffs = file_cache.files.read(root / file.path, [DIFF], keep=False).column(DIFF)
        total += pc.sum(diffs).as_py() or 0
    return total


def first_rows(
    root: Location, state: TraceState, files: Sequence[DataFile], limit: int
) -> pa.Table | None:
    """Up to ``limit`` rows of the collection the files hold, every time accumulated,
    each repeated by its multiplicity: those of the keys with the smallest hashes.
    None when Spark should take them: a nested column (which the driver does not
    group by), or more stored records to read than the driver keeps (``DRIVER_KEPT_RECORDS``)."""
    if not driver_merge.groupable(arrow_schema(spark_files.stored_schema(state))):
        return None
    records = sum(f.records for f in files)
    data = spark_files.data_schema(state).fieldNames()
    # Hashes spread evenly: a window of the hash space holding about four times
    # the rows wanted, widened until it yields them (retracted rows hold none).
    wanted = 4 * limit
    while True:
        width = -(-HASH_SPACE * wanted // max(records, 1))
        bound = LOWEST_HASH + width if width < HASH_SPACE else None  # exclusive
        chosen = [f for f in files if _starts_below(f, bound)]
        if sum(f.records for f in chosen) > DRIVER_KEPT_RECORDS:
            return None
        rows = _accumulated(root, state, chosen, bound, data, limit)
        if rows.num_rows >= limit or bound is None:
            return rows
        wanted *= 8


def _starts_below(file: DataFile, bound: int | None) -> bool:
    bounds = hash_bounds(file)
    return bound is None or bounds is None or bounds[0] < bound


def _accumulated(
    root: Location,
    state: TraceState,
    files: Sequence[DataFile],
    bound: int | None,
    data: list[str],
    limit: int,
) -> pa.Table:
    """The first ``limit`` rows of ``files`` with key hashes below ``bound`` (if
    any), times dropped, consolidated, in key hash order, each repeated by its
    (positive) multiplicity. A file not kept decoded already is read, not kept:
    a few of its columns would take the place of all of them."""
    columns = [*data, KEY_HASH, DIFF]
    types = arrow_schema(spark_files.stored_schema(state))
    parts = []
    for file in files:
        table = file_cache.files.read(root / file.path, columns, keep=False)
        table = table.select(columns)
        if bound is not None:
            table = table.filter(pc.less(table.column(KEY_HASH), bound))
        parts.append(table.cast(_of(types, columns)))
    if not parts:
        return _of(types, data).empty_table()
    summed = driver_merge.consolidated(pa.concat_tables(parts))
    summed = summed.filter(pc.greater(summed.column(DIFF), 0))
    rows: list[int] = []
    for i, copies in enumerate(summed.column(DIFF).to_pylist()):
        rows.extend([i] * min(copies, limit - len(rows)))
        if len(rows) == limit:
            break
    return summed.take(pa.array(rows, pa.int64())).select(data)


def _of(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    return pa.schema([schema.field(c) for c in columns])
