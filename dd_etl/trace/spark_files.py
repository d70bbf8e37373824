"""Spark jobs that turn updates into the parquet files of a batch, and read them back.

Files of a batch are slices of the key-hash range, sorted by key hash, so each file
covers a narrow hash interval and its Delta statistics let a key lookup skip
every file that cannot hold the key. Updates are consolidated on the way in:
equal ``(data, time)`` rows are summed and zero diffs dropped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import posixpath
import shutil
from collections.abc import Sequence

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl import sql_text
from dd_etl.lake import Location
from dd_etl.lattice import Antichain
from dd_etl.local_relations import empty_frame
from dd_etl.profiling import SPARK, phase
from dd_etl.spark_driver import driver_for
from dd_etl.sql_text import cast, quote
from dd_etl.trace import hash_slices
from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import DIFF, KEY_HASH, time_columns
from dd_etl.trace.consolidation import consolidated
from dd_etl.trace.errors import TraceError
from dd_etl.trace.file_stats import make_stats
from dd_etl.trace.hash_slices import LOWEST
from dd_etl.trace.slots import Projected
from dd_etl.trace.state import TraceState

ROWS_PER_FILE = 250_000

ONE_TASK_RECORDS = 1_000_000
"""A batch bounded by this many records is written by one task, which starts a
new file every ``ROWS_PER_FILE`` records of its key-hash order: no job samples
the batch for range boundaries, and a loose bound (a reduction's, that every key
it reads a change of changes) costs nothing."""


SLICES_PER_CORE = 4
"""A batch Spark writes is cut into at most this many slices per task it runs at
once: enough for slices of uneven cost to even out, and not a file per slice
of a bound far above what a batch holds (a load's reduction, bounded by the
records it reads, 100 M, holds a row per group: 265 of them were 194 files)."""


def data_schema(state: TraceState) -> StructType:
    return StructType.fromJson(json.loads(state.schema))


def stored_schema(state: TraceState) -> StructType:
    """Data columns, key hash, time coordinates, diff: the layout of every batch file."""
    fields = list(data_schema(state).fields)
    fields.append(StructField(KEY_HASH, LongType(), False))
    fields += [StructField(c, LongType(), False) for c in time_columns(state.dims)]
    fields.append(StructField(DIFF, LongType(), False))
    return StructType(fields)


def key_hash(key: Sequence[str]) -> str:
    """The 64-bit hash files are sorted and pruned by, as SQL; a trace without key
    columns (e.g. a global aggregate) keeps everything under one hash."""
    if not key:
        return "CAST(0 AS BIGINT)"
    return f"xxhash64({', '.join(quote(k) for k in key)})"


def to_stored(state: TraceState, updates: DataFrame) -> DataFrame:
    """Check and order the columns of an update DataFrame as the trace stores them."""
    return stored_projection(state, updates).selected()


def stored_projection(state: TraceState, updates: DataFrame) -> Projected:
    """``updates`` in the stored layout, as a projection still to be made, its
    columns checked to be there."""
    expected = data_schema(state)
    times = time_columns(state.dims)
    missing = [c for c in [*expected.fieldNames(), *times, DIFF] if c not in updates.columns]
    if missing:
        raise TraceError(f"trace {state.name!r}: updates lack columns {missing}")
    have = {f.name: f.dataType for f in updates.schema.fields}
    data = [
        quote(f.name) if have[f.name] == f.dataType else cast(quote(f.name), f.dataType)
        for f in expected.fields
    ]
    exprs = [*data, key_hash(state.key), *[cast(quote(c), LongType()) for c in [*times, DIFF]]]
    return Projected(updates, tuple(exprs), stored_schema(state))


def consolidate(
    df: DataFrame,
    partitions: int,
    distinct: bool = False,
    shuffled: bool = False,
    hashes: tuple[int, int] = (LOWEST, -LOWEST),
) -> DataFrame:
    """Sum the diffs of equal rows, drop zeros, and lay rows out by key hash; only
    the layout for ``distinct`` rows, of which no two share data and time (and
    none has a zero diff): summing a million distinct rows costs as much again as
    sorting them.

    Several partitions are slices of the key-hash range ``hashes`` (``[low,
    high)``, all of it unless the rows are known to lie in less), partition ``i``
    slice ``i`` (``hash_slices``): no job samples the rows for range boundaries.
    The slice is a grouping column too, so the aggregation sees its input
    clustered already and needs no second shuffle. One partition needs no
    slices: it satisfies the aggregation's distribution already. It is made by a
    shuffle when ``shuffled`` (the plan's last stage may scan much to keep
    little: a lookup in a large history), else by coalescing the partitions of
    a plan that is small throughout (a small interval's, one partition already).
    """
    columns = df.columns
    group = [c for c in columns if c != DIFF]
    if partitions > 1:
        key = hash_slices.partition_key(hash_slices.slice_of(partitions, *hashes), partitions)
        keyed = sql_text.select(df, ["*", f"{key} AS {quote(_SLICE_KEY)}"])
        laid_out = keyed.repartition(partitions, _SLICE_KEY)
        group.append(_SLICE_KEY)
    else:
        laid_out = df.repartition(1) if shuffled else df.coalesce(1)
    out = (laid_out if distinct else consolidated(laid_out, group)).sortWithinPartitions(KEY_HASH)
    # the stored layout ends with the diff, as the aggregation leaves it
    return out if out.columns == columns else sql_text.columns(out, columns)


_SLICE_KEY = "__slice_key"


def advance_times(df: DataFrame, dims: int, since: Antichain) -> DataFrame:
    """Replace every time by ``advance_by(time, since)``: per coordinate,
    the least over frontier elements of ``max(time_i, f_i)``."""
    if since.is_empty():
        return df
    columns = time_columns(dims)
    advanced: dict[str, Column] = {}
    for i, c in enumerate(columns):
        joins = [F.greatest(F.col(c), F.lit(f[i])) for f in since]
        advanced[c] = joins[0] if len(joins) == 1 else F.least(*joins)
    return df.withColumns(advanced)


def write_files(
    spark: SparkSession,
    root: Location,
    directory: str,
    state: TraceState,
    df: DataFrame,
    records_hint: int | None,
    rows_per_file: int = ROWS_PER_FILE,
    distinct: bool = False,
    shuffled: bool = False,
    hashes: tuple[int, int] = (LOWEST, -LOWEST),
) -> list[DataFile]:
    """Consolidate ``df`` (stored layout, its key hashes in ``hashes``) and write it
    under ``root/directory`` in files of at most ``rows_per_file`` records: in
    slices of its key hashes, a file's worth each but no more than
    ``SLICES_PER_CORE`` per task Spark runs at once, when ``records_hint`` says
    there are more than ``ONE_TASK_RECORDS``; else by one task (``consolidate``
    tells ``shuffled``)."""
    few = records_hint is None or records_hint <= ONE_TASK_RECORDS
    cores = driver_for(df.sparkSession).default_parallelism()
    files = math.ceil((records_hint or 0) / rows_per_file)
    partitions = 1 if few else min(files, SLICES_PER_CORE * cores)
    out = consolidate(df, partitions, distinct, shuffled, hashes)
    with phase(SPARK):
        writer = out.write.mode("error").option("maxRecordsPerFile", rows_per_file)
        writer.parquet((root / directory).spark)
    return describe_files(root, directory, state)


def describe_files(root: Location, directory: str, state: TraceState) -> list[DataFile]:
    """Read the parquet footers of freshly written files into Delta add-action facts;
    delete what Spark wrote beside them (markers, checksums) and empty files."""
    bounded = [KEY_HASH, *time_columns(state.dims)]
    fs = root.filesystem
    found = fs.get_file_info(
        pafs.FileSelector((root / directory).fs_path, recursive=True, allow_not_found=True)
    )
    files: list[DataFile] = []
    for info in sorted(found, key=lambda i: i.path):
        if info.type != pafs.FileType.File:
            continue
        if not info.path.endswith(".parquet"):
            fs.delete_file(info.path)
            continue
        with fs.open_input_file(info.path) as stream:
            meta = pq.ParquetFile(stream).metadata
        if meta.num_rows == 0:
            fs.delete_file(info.path)
            continue
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        mins: dict[str, int] = {}
        maxs: dict[str, int] = {}
        for c in bounded:
            j = names.index(c)
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(j).statistics
                if st is None or not st.has_min_max:
                    continue
                mins[c] = min(mins.get(c, st.min), st.min)
                maxs[c] = max(maxs.get(c, st.max), st.max)
        relative = posixpath.relpath(info.path, root.fs_path)
        stats = make_stats(meta.num_rows, mins, maxs)
        files.append(DataFile(relative, info.size, meta.num_rows, stats))
    return files


def read_files(
    spark: SparkSession, root: Location, state: TraceState, files: Sequence[DataFile]
) -> DataFrame:
    schema = stored_schema(state)
    if not files:
        return empty_frame(spark, schema)
    return spark.read.schema(schema).parquet(*[(root / f.path).spark for f in files])


def remove_files(root: Location, paths: Sequence[str]) -> None:
    """Delete the files at ``paths`` (relative to ``root``), and on a local disk the
    directories they leave empty (an object store keeps no directories)."""
    fs = root.filesystem
    directories = set()
    for relative in paths:
        path = (root / relative).fs_path
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(path)
        directories.add(posixpath.dirname(path))
    if root.is_local:
        for d in directories:
            if os.path.isdir(d) and not os.listdir(d):
                shutil.rmtree(d, ignore_errors=True)
