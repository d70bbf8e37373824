"""Small reads made in the driver with pyarrow, handed to Spark as local relations.

A small change touches few keys, but a Spark scan of a trace reads whole files:
history lookups would cost what the data costs, not what the change costs.
Batch files are sorted by key hash, and the hashes a lookup needs are known
before any Spark job (those of the batch that caused it, read here too), so
the driver reads the files that can hold them, keeps the matching rows and
gives Spark only those. Spark then plans over a local relation whose size it
knows exactly, and an empty one prunes the plan that reads it.

The batches a small interval appended are read back the same way, whole: a
plan whose inputs are all local relations needs no file listing and no scan
set-up per read. Files are read one at a time and only their matching rows
kept, so the driver holds one file plus the result; a read keeping more than
``DRIVER_KEPT_RECORDS`` rows is left to a Spark scan instead.

Writes of up to a few files' worth go the other way: Spark computes the batch
and hands it to the driver as Arrow, which writes its files, consecutive slices
of its key-hash order. A Spark file write pays for a
commit protocol (temporary directories, renames, markers) that a batch file,
referenced only once its trace's log commits it, does not need; and the batches
of several traces are computed by one Spark job (``collect_each``), where each
would be a job of its own, of fixed cost, if Spark wrote it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame

from dd_etl.arrow_schema import arrow_schema
from dd_etl.lake import Location
from dd_etl.lattice import Time
from dd_etl.profiling import count_shared
from dd_etl.trace import file_cache, spark_files
from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import KEY_HASH, time_columns
from dd_etl.trace.slots import PART, Projected, slot, tagged_union
from dd_etl.trace.state import TraceState

DRIVER_KEPT_RECORDS = 250_000
"""A driver read keeping more rows than this is left to a Spark scan."""


def key_hashes(root: Location, files: Sequence[DataFile], since: Time) -> list[int]:
    """The sorted distinct key hashes of the rows of ``files`` at times ``≥ since``
    (every coordinate): the keys a batch appended from ``since`` on touched."""
    hashes: set[int] = set()
    times = time_columns(len(since))
    for file in files:
        table = file_cache.files.read(root / file.path, [KEY_HASH, *times])
        keep = _at_or_after(table, times, since)
        hashes.update(table.column(KEY_HASH).filter(keep).to_pylist())
    return sorted(hashes)


def read_table(
    root: Location,
    state: TraceState,
    files: Sequence[DataFile],
    hashes: Sequence[int] | None = None,
) -> pa.Table | None:
    """The stored rows of ``files`` (only those whose key hash is one of ``hashes``,
    when given) as the Arrow table the driver holds; None when they are too many
    to hold (the caller then scans with Spark)."""
    if hashes is None and sum(f.records for f in files) > DRIVER_KEPT_RECORDS:
        return None
    schema = spark_files.stored_schema(state)
    wanted = None if hashes is None else pa.array(hashes, pa.int64())
    parts: list[pa.Table] = []
    kept = 0
    for file in files:
        table = file_cache.files.read(root / file.path, schema.fieldNames())
        if wanted is not None:
            table = table.filter(pc.is_in(table.column(KEY_HASH), value_set=wanted))
        kept += table.num_rows
        if kept > DRIVER_KEPT_RECORDS:
            return None
        parts.append(table.select(schema.fieldNames()))
    # Files written by Spark and by the driver store some types differently
    # (timestamps as INT96 or as microseconds), and declare nullability as
    # their writer saw it: read back, all are the stored schema's Arrow types.
    types = arrow_schema(schema)
    return pa.concat_tables([t.cast(types) for t in parts]) if parts else types.empty_table()


def collect_each(
    dfs: Sequence[DataFrame | Projected],
    at_most: Sequence[int],
    tasks: Sequence[int] | None = None,
    labels: Sequence[str | None] | None = None,
) -> list[pa.Table | None]:
    """The rows of each of ``dfs`` in the driver, in its order, or None for one with
    more rows than its ``at_most``: all in one Spark job (``slots.tagged_union``),
    which brings at most ``at_most + 1`` rows of each to the driver; consecutive
    ones computed by one task, as many as ``tasks`` says for each (default: all
    by one). Each DataFrame must be one partition (its order is kept). ``labels``:
    what each one's part of the job is profiled as (``profiling.count_shared``)."""
    if not dfs:
        return []
    projected = [Projected.of(df) for df in dfs]
    limited = [p.over(p.frame.limit(n + 1)) for p, n in zip(projected, at_most, strict=True)]
    union, placement = tagged_union(limited, tasks=tasks or [len(dfs)])
    table = union.toArrow()
    count_shared(union, labels or [None] * len(dfs))
    out: list[pa.Table | None] = []
    for i, (p, limit, placed) in enumerate(zip(limited, at_most, placement, strict=True)):
        part = table.filter(pc.equal(table.column(PART), i))
        rows = part.select([slot(k) for k in placed]).rename_columns(p.schema.fieldNames())
        out.append(rows if rows.num_rows <= limit else None)
    return out


def write_files(root: Location, directory: str, table: pa.Table, rows_per_file: int) -> None:
    """Write ``table`` as the files of ``root/directory``, each a consecutive slice
    of at most ``rows_per_file`` rows (none if empty): for a batch sorted by key
    hash, files of consecutive hash ranges."""
    if table.num_rows == 0:
        return
    target = root / directory
    target.make_directory()
    for n, start in enumerate(range(0, table.num_rows, rows_per_file)):
        path = target / f"part-{n:05d}.parquet"
        pq.write_table(table.slice(start, rows_per_file), path.fs_path, filesystem=path.filesystem)
    if table.num_rows <= rows_per_file:
        # read back right away, and by the readers' lookups (a slice of a larger
        # table would keep all of it in memory)
        file_cache.files.keep(target / "part-00000.parquet", table)


def between(table: pa.Table, at: Time | None, since: Time | None) -> pa.Table:
    """The rows of ``table`` (stored updates) at times ``≤ at`` and ``≥ since``."""
    if at is not None:
        for column, bound in zip(time_columns(len(at)), at, strict=True):
            table = table.filter(pc.less_equal(table.column(column), bound))
    if since is not None:
        table = table.filter(_at_or_after(table, time_columns(len(since)), since))
    return table


def _at_or_after(table: pa.Table, times: Sequence[str], since: Time) -> pa.Array:
    keep = pc.greater_equal(table.column(times[0]), since[0])
    for column, bound in zip(times[1:], since[1:], strict=True):
        keep = pc.and_(keep, pc.greater_equal(table.column(column), bound))
    return keep
