"""Traces persisted as Delta tables, with their data work done by Spark.

Layout of a trace at its ``Location`` (a directory, or a prefix of an object store)::

    _delta_log/              commits: trace state + add/remove actions
    data/<batch id>/*.parquet   files of appended batches
    data/<merge id>/<slice>/*.parquet   files of merged batches, one dir per merge step attempt

Files not referenced by the current Delta snapshot or by a merge in progress
are never read (readers list files from the log) and are removed by ``vacuum``.
"""

from __future__ import annotations

import math
import shutil
import uuid
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from dd_etl import sql_text
from dd_etl.arrow_schema import arrow_schema
from dd_etl.lake import Location, Where, as_location
from dd_etl.lattice import Time
from dd_etl.local_relations import local_relation
from dd_etl.profiling import DELTA_LOG, LOOKUPS, SPARK, count_commit, phase
from dd_etl.spark_driver import driver_for
from dd_etl.sql_text import quote
from dd_etl.trace import arrow_files, delta_log, driver_merge, spark_files, summary
from dd_etl.trace.batch import DataFile, batch_dir
from dd_etl.trace.columns import DIFF, KEY_HASH, time_columns
from dd_etl.trace.consolidation import consolidated
from dd_etl.trace.errors import SinceViolation, TraceError, TraceNotFound
from dd_etl.trace.executor_writes import ExecutorBatch
from dd_etl.trace.file_stats import column_bounds, hash_bounds
from dd_etl.trace.hash_slices import LOWEST
from dd_etl.trace.placement import BULK, DRIVER, Placement
from dd_etl.trace.slots import Projected
from dd_etl.trace.spine import HASH_SPACE, HashRange
from dd_etl.trace.state import Merge, TraceState
from dd_etl.trace.storage import Commit, Snapshot
from dd_etl.trace.trace import Trace, new_batch_id

SMALL_BATCH_BYTES = 32 << 20
"""Batches Spark's plan statistics put below this size are not counted first: one
Spark job computes each into the driver, which writes its files. The estimate is
of stored bytes for a scan: 1 M rows of eleven columns it put at 21 MB were 69 MB
in Arrow."""

DRIVER_WRITTEN_RECORDS = 4 * spark_files.ROWS_PER_FILE
"""A batch of unknown size in the driver's placement is collected and written by
the driver up to this many records. The collect computes the whole batch before
the driver sees a row, so a limit the batch passes is Spark's work thrown away
(then done again by a write)."""

PRUNING_MIN_FILES = 4
"""Below this many files a key lookup reads them all rather than prune."""

KEY_PRUNING_LIMIT = 100_000
"""Up to this many distinct probe keys, lookups collect key hashes and prune files."""

WHOLE_READ_RECORDS = 20_000
"""Up to this many records in the files a key lookup may need, a local read takes
them all in the driver rather than launch a Spark job to find which the keys'
hashes prune: the job costs more than the read (a small trace's files each span
its whole hash range, so none would be pruned anyway)."""

WHOLE_SCAN_RECORDS = 1_000_000
"""Up to this many records, a key lookup by Spark scans all the files that may
hold them rather than first collect the keys' hashes to prune them: that job
computes the keys once more (a reduction's come out of a join) and costs about
what scanning a million records does on two cores."""


@dataclass(frozen=True)
class CollectedBatch:
    """A batch Spark computed and the driver holds, as a batch file holds it
    (consolidated, in the stored layout, sorted by key hash): writing it is
    writing its file, with no Spark job."""

    rows: pa.Table


@dataclass(frozen=True)
class PlannedBatch:
    """A batch planned for the driver to hold (``plan_batch``): ``rows`` in the
    stored layout, in one partition, at most ``at_most`` of them taken."""

    rows: DataFrame | Projected
    at_most: int
    summed: bool  # Spark consolidated the rows already, else the driver does
    distinct: bool  # no two rows share data and time: nothing to sum
    label: str | None = None  # what its part of a shared job is profiled as (None: the job's)

    @property
    def session(self) -> SparkSession:
        rows = self.rows
        return (rows.frame if isinstance(rows, Projected) else rows).sparkSession

    def frame(self) -> DataFrame:
        """The rows as one DataFrame, as Spark plans them within the union."""
        return self.rows.selected() if isinstance(self.rows, Projected) else self.rows

    @staticmethod
    def as_they_are(rows: DataFrame, at_most: int) -> PlannedBatch:
        """Rows the driver takes as Spark computes them, with nothing to sum or sort
        (a sink's), in one partition."""
        return PlannedBatch(rows.coalesce(1), at_most, summed=True, distinct=True)

    def collected(self, table: pa.Table) -> CollectedBatch:
        """The batch, from the rows Spark computed for ``rows``."""
        return CollectedBatch(table if self.summed else driver_merge.laid_out(table, self.distinct))


def plan_batch(
    state: TraceState, stored: DataFrame | Projected, at_most: int, distinct: bool = False
) -> PlannedBatch:
    """``stored`` (the trace's stored layout, or updates with the SQL that makes
    it) planned to be computed into the driver.

    The driver sums equal rows and sorts them once it holds them: the few thousand
    rows of a small interval cost Arrow a millisecond, while a hash aggregation
    and a sort in each trace's plan cost Spark several operators to optimise,
    prepare and run. Rows of nested types, which Arrow does not group, Spark
    consolidates."""
    if driver_merge.groupable(arrow_schema(spark_files.stored_schema(state))):
        one = (
            stored.over(stored.frame.coalesce(1))
            if isinstance(stored, Projected)
            else stored.coalesce(1)
        )
        return PlannedBatch(one, at_most, summed=False, distinct=distinct)
    if isinstance(stored, Projected):
        stored = stored.selected()
    return PlannedBatch(spark_files.consolidate(stored, 1, distinct), at_most, True, distinct)


def collect_batches(tasks: Sequence[Sequence[PlannedBatch]]) -> list[CollectedBatch | None]:
    """The planned batches, computed by one Spark job, those of each of ``tasks``
    by one task, and held by the driver, in order (None for a batch of more than
    its ``at_most`` rows, which its trace then writes with Spark on its own).
    Which batches share a job and a task is the caller's to decide
    (``batch_writer``): the driver holds all of a job's at once."""
    planned = [p for task in tasks for p in task]
    with phase(SPARK):
        tables = arrow_files.collect_each(
            [p.rows for p in planned],
            [p.at_most for p in planned],
            [len(t) for t in tasks],
            [p.label for p in planned],
        )
    return [
        None if table is None else plan.collected(table)
        for plan, table in zip(planned, tables, strict=True)
    ]


class DeltaStorage:
    def __init__(
        self,
        spark: SparkSession,
        where: Location,
        rows_per_file: int = spark_files.ROWS_PER_FILE,
        driver_merged: int = driver_merge.DRIVER_MERGED_RECORDS,
    ):
        self.spark = spark
        self.where = where
        self.rows_per_file = rows_per_file
        self.driver_merged = driver_merged
        """A merge step reading at most this many records is made by the driver."""

    def load(self, known: Snapshot | None = None) -> Snapshot:
        with phase(DELTA_LOG):
            return delta_log.load(self.where, known)

    def stamp(self, version: int) -> object:
        return delta_log.stamp(self.where, version)

    def commit(self, expected_version: int, commit: Commit) -> int:
        with phase(DELTA_LOG):
            version = delta_log.commit(self.where, expected_version, commit)
        count_commit()
        return version

    def write_batch(
        self,
        state: TraceState,
        batch_id: str,
        updates: DataFrame | CollectedBatch,
        at_most: int | None = None,
        distinct: bool = False,
        placement: Placement = BULK,
    ) -> list[DataFile]:
        """A batch of unknown size is written without a job counting it first where
        it is likely small: in the driver's ``placement`` (collected up to
        ``DRIVER_WRITTEN_RECORDS``), or where Spark estimates its plan small; else
        it is counted, so that many tasks write it."""
        if at_most == 0:
            return []
        if isinstance(updates, CollectedBatch):
            return self._write_collected(state, batch_dir(batch_id), updates.rows)
        directory = batch_dir(batch_id)
        stored = spark_files.to_stored(state, updates)
        if (
            at_most is not None
            or placement.driver
            or driver_for(stored.sparkSession).estimated_bytes(stored) <= SMALL_BATCH_BYTES
        ):
            return self._write_files(state, directory, stored, at_most, distinct, placement)
        stored = stored.persist()
        try:
            with phase(SPARK):
                records = stored.count()
            if not records:
                return []
            return self._write_files(state, directory, stored, records, distinct, placement)
        finally:
            stored.unpersist()

    def _write_files(
        self,
        state: TraceState,
        directory: str,
        stored: DataFrame,
        records: int | None,
        distinct: bool,
        placement: Placement,
        hashes: tuple[int, int] = (LOWEST, -LOWEST),
    ) -> list[DataFile]:
        """Write ``stored`` (of at most about ``records`` records, if known;
        ``distinct`` ones need no summing; key hashes in ``hashes``) under
        ``directory``. In the driver's
        placement, one file's worth (up to ``DRIVER_WRITTEN_RECORDS`` of unknown
        size) is collected and written by the driver; everything else is written
        by Spark's executors (``spark_files.write_files``)."""
        if placement.driver and (records is None or records <= self.rows_per_file):
            at_most = self.rows_per_file if records is not None else DRIVER_WRITTEN_RECORDS
            [batch] = collect_batches([[plan_batch(state, stored, at_most, distinct)]])
            if batch is not None:
                return self._write_collected(state, directory, batch.rows)
        return spark_files.write_files(
            self.spark,
            self.where,
            directory,
            state,
            stored,
            records,
            self.rows_per_file,
            distinct,
            shuffled=not placement.driver,
            hashes=hashes,
        )

    def _write_collected(self, state: TraceState, directory: str, rows: pa.Table) -> list[DataFile]:
        arrow_files.write_files(self.where, directory, rows, self.rows_per_file)
        return spark_files.describe_files(self.where, directory, state)

    def merge_slice(
        self, state: TraceState, merge: Merge, inputs: Sequence[DataFile], hashes: HashRange
    ) -> list[DataFile]:
        # one directory per attempt: a crashed attempt's files never mix with a retry's
        attempt = uuid.uuid4().hex[:8]
        directory = f"{batch_dir(merge.id)}/{hashes.start + (1 << 63):016x}-{attempt}"
        rows = driver_merge.merged(
            self.where, state, inputs, hashes, merge.since, self.driver_merged
        )
        if rows is not None:  # few records: no Spark job
            return self._write_collected(state, directory, rows)
        df = spark_files.read_files(self.spark, self.where, state, inputs)
        df = df.where(F.col(KEY_HASH) >= hashes.start)
        if hashes.end < HASH_SPACE >> 1:
            df = df.where(F.col(KEY_HASH) < hashes.end)
        df = spark_files.advance_times(df, state.dims, merge.since)
        estimate = sum(f.records for f in inputs)
        return self._write_files(
            state, directory, df, estimate, False, BULK, (hashes.start, hashes.end)
        )

    def discard(self, files: Sequence[DataFile]) -> None:
        spark_files.remove_files(self.where, [f.path for f in files])

    def exists(self, file: DataFile) -> bool:
        found = self.where.filesystem.get_file_info((self.where / file.path).fs_path)
        return bool(found.type == pafs.FileType.File)


class DeltaTrace(Trace[DataFrame | CollectedBatch]):
    """A trace stored as a Delta table; updates go in and come out as Spark DataFrames."""

    def __init__(
        self,
        spark: SparkSession,
        where: Where,
        rows_per_file: int = spark_files.ROWS_PER_FILE,
        driver_merged: int = driver_merge.DRIVER_MERGED_RECORDS,
    ):
        self.spark = spark
        self.where = where = as_location(where)
        self.delta_storage = DeltaStorage(spark, where, rows_per_file, driver_merged)
        super().__init__(self.delta_storage)

    @classmethod
    def create(
        cls,
        spark: SparkSession,
        where: Where,
        name: str,
        schema: StructType,
        key: Sequence[str],
        dims: int = 1,
        rows_per_file: int = spark_files.ROWS_PER_FILE,
        meta: Mapping[str, str] | None = None,
        driver_merged: int = driver_merge.DRIVER_MERGED_RECORDS,
    ) -> DeltaTrace:
        """Open the trace, created first if it does not exist yet (a new generation,
        recording ``meta``). Opening comes first: a run opens every trace of its
        pipeline, and all but the new ones exist."""
        unknown = [k for k in key if k not in schema.fieldNames()]
        if unknown:
            raise TraceError(f"trace {name!r}: key columns {unknown} are not in the schema")
        where = as_location(where)
        try:
            return cls(spark, where, rows_per_file, driver_merged)
        except TraceNotFound:
            pass
        state = TraceState.new(name, dims, tuple(key), schema.json(), uuid.uuid4().hex, meta)
        where.make_directory()
        delta_log.create(where, state, arrow_schema(spark_files.stored_schema(state)))
        return cls(spark, where, rows_per_file, driver_merged)

    def batch_plan(self, updates: DataFrame, distinct: bool = False) -> PlannedBatch:
        """``updates`` planned as one file of this trace, to be computed into the
        driver's hands and appended as a ``CollectedBatch``; ``distinct`` ones need
        no summing (``Storage.write_batch``)."""
        stored = spark_files.stored_projection(self.state, updates)
        return plan_batch(self.state, stored, self.delta_storage.rows_per_file, distinct)

    def executor_batch(
        self, updates: DataFrame, distinct: bool = False, slices_log2: int = 0
    ) -> ExecutorBatch:
        """``updates`` planned as a batch of this trace for the executors to write with
        other traces' (``executor_writes.write_each``), by ``2 ** slices_log2`` tasks:
        consolidated by Spark unless ``distinct``, in the stored layout."""
        stored = spark_files.to_stored(self.state, updates)
        if not distinct:
            stored = consolidated(stored)
        return ExecutorBatch(
            self.where,
            new_batch_id(),
            stored,
            self.state.dims,
            self.delta_storage.rows_per_file,
            slices_log2,
        )

    # --------------------------------------------------------------- reading

    def updates(
        self,
        keys: DataFrame | None = None,
        at: Time | None = None,
        since: Time | None = None,
        key_hashes: Sequence[int] | None = None,
        exact: bool = True,
        placement: Placement = BULK,
        columns: Sequence[str] | None = None,
    ) -> DataFrame:
        """Stored updates (data, key hash, times, diff) at times ``≤ at`` and ``≥ since``,
        optionally only of ``keys``, read as ``placement`` says; only ``columns`` of
        them, in that order, if given (rows the driver reads, it selects and bounds
        in time itself: a local relation, not a select and a filter over one).

        The times are bounded by choosing files by their time bounds, and by a
        filter only where a chosen file holds times on both sides of a bound (a
        merged batch): a run's plans then hold no literal of its epoch, so Spark's
        code generated for one epoch serves the next (``_time_filter``).

        ``key_hashes``, the sorted hashes of ``keys`` as this trace hashes them
        (``key_types``), when the caller knows them: only rows with those hashes
        are read, in the driver (``arrow_files``), rather than whole files by Spark.
        Those rows are exactly the keys' unless ``exact`` is false: then rows of
        other keys sharing a hash may stay, for a caller that joins on the key
        anyway, saving a join of every row read.
        """
        files = self._files_between(at, since)
        bounded = _time_filter(files, at, since, self.state.dims)
        if keys is None or not self.state.key:
            found = (
                self._read_in_driver(files, None, at, since, columns) if placement.driver else None
            )
            if found is not None:
                return _partitioned(found, placement)
            return _selected(_where(_partitioned(self._scan(files), placement), bounded), columns)
        if key_hashes is None:
            df = _where(
                self._read(self._files_for_keys(files, keys, placement), placement), bounded
            )
        else:
            files = [f for f in files if _holds_any(f, key_hashes)]
            found = self._read_in_driver(files, key_hashes, at, since, None if exact else columns)
            if found is None:
                df = _where(_partitioned(self._scan(files), placement), bounded)
            elif exact:
                df = _partitioned(found, placement)
            else:
                return _partitioned(found, placement)
        return _selected(self._of_keys(df, keys, placement), columns)

    def _of_keys(self, df: DataFrame, keys: DataFrame, placement: Placement) -> DataFrame:
        """The rows of ``df`` (of this trace's columns) whose key is one of ``keys``'."""
        # An inner join with the distinct keys, not a semi join: Spark moves a semi
        # join below the one-partition coalesce of a local read, and then shuffles.
        probe = [(quote(k), quote(f"__probe_{i}")) for i, k in enumerate(self.state.key)]
        wanted = sql_text.select(keys, [f"{k} AS {p}" for k, p in probe]).distinct()
        if placement.driver:
            wanted = wanted.coalesce(1)
        elif placement.broadcast_keys:
            wanted = wanted.hint("broadcast")
        cond = sql_text.expr(df.sparkSession, " AND ".join(f"{k} <=> {p}" for k, p in probe))
        return sql_text.columns(df.join(wanted, cond, "inner"), df.columns)

    def _files_between(self, at: Time | None, since: Time | None) -> list[DataFile]:
        """The files that can hold times ``≤ at`` and ``≥ since``, by their bounds."""
        files = self.files()
        if at is not None:
            files = [f for f in files if _may_hold_times_before(f, at, self.state.dims)]
        if since is not None:
            files = [f for f in files if _may_hold_times_from(f, since, self.state.dims)]
        return files

    def stored_rows(
        self,
        at: Time | None = None,
        since: Time | None = None,
        key_hashes: Sequence[int] | None = None,
    ) -> pa.Table | None:
        """The stored updates at times ``≤ at`` and ``≥ since`` (of ``key_hashes``
        only, when given), as the driver reads them: for a plan that decides from
        a few rows what to read, before any Spark job. None when they are more
        than the driver keeps."""
        files = self._files_between(at, since)
        if key_hashes is not None:
            files = [f for f in files if _holds_any(f, key_hashes)]
        with phase(LOOKUPS):
            table = arrow_files.read_table(self.where, self.state, files, key_hashes)
        return None if table is None else arrow_files.between(table, at, since)

    def size(self) -> int:
        """The collection's number of rows, everything committed accumulated, read
        in the driver (``summary``): no Spark job."""
        return summary.size(self.where, self.files())

    def first_rows(self, limit: int) -> pa.Table | None:
        """A few rows of the collection, everything committed accumulated, read in
        the driver (``summary.first_rows``); None when Spark should read them."""
        return summary.first_rows(self.where, self.state, self.files(), limit)

    def _read(self, files: Sequence[DataFile], placement: Placement) -> DataFrame:
        """The rows of ``files``: in the driver in its placement, else by Spark."""
        found = self._read_in_driver(files) if placement.driver else None
        return _partitioned(found if found is not None else self._scan(files), placement)

    def _scan(self, files: Sequence[DataFile]) -> DataFrame:
        return spark_files.read_files(self.spark, self.where, self.state, files)

    def _read_in_driver(
        self,
        files: Sequence[DataFile],
        key_hashes: Sequence[int] | None = None,
        at: Time | None = None,
        since: Time | None = None,
        columns: Sequence[str] | None = None,
    ) -> DataFrame | None:
        """The rows of ``files`` (of ``key_hashes`` only, if given; at times ``≤ at``
        and ``≥ since``; only ``columns``) read in the driver, or None when they are
        too many (``arrow_files.read_table``)."""
        stored = spark_files.stored_schema(self.state)
        with phase(LOOKUPS):
            table = arrow_files.read_table(self.where, self.state, files, key_hashes)
            if table is None:
                return None
            if at is not None or since is not None:
                table = arrow_files.between(table, at, since)
            if columns is not None:
                table = table.select(list(columns))
                stored = StructType([stored[c] for c in columns])
            return local_relation(self.spark, table, stored)

    def read_at(
        self,
        at: Time | None = None,
        keys: DataFrame | None = None,
        key_hashes: Sequence[int] | None = None,
        placement: Placement = BULK,
        exact: bool = True,
    ) -> DataFrame:
        """The collection accumulated at time ``at`` (default: everything committed),
        as data columns plus ``_diff``, the multiplicity of each distinct row;
        ``keys``, ``key_hashes``, ``exact`` and ``placement`` as ``updates`` takes
        them. Rows the driver reads it accumulates itself (``driver_merge.summed``):
        a plan without an aggregation, and without a join of ``keys`` when not
        ``exact``: rows of other keys may then stay (those sharing the keys'
        hashes, or all of a trace small enough to read whole), for a caller that
        joins on the key anyway."""
        self._check_since(at)
        keyed = keys is not None and bool(self.state.key)
        held = self._accumulated_in_driver(at, keyed, key_hashes) if placement.driver else None
        if held is None:
            updates = self.updates(keys, at, None, key_hashes, exact, placement)
            return consolidated(self._data_and_diff(updates), self._data_columns)
        held = _partitioned(held, placement)
        if keys is not None and keyed and exact:
            return self._of_keys(held, keys, placement)
        return held

    def _accumulated_in_driver(
        self, at: Time | None, keyed: bool, key_hashes: Sequence[int] | None
    ) -> DataFrame | None:
        """The stored rows at times ``≤ at`` a lookup reads (``keyed``: those of
        ``key_hashes``, or all where a read of all costs less than finding which
        files the keys need), accumulated by the driver as Spark's grouping would
        (``driver_merge``), as a local relation; None when the driver does not
        hold them (too many, or a column Arrow cannot group)."""
        stored = spark_files.stored_schema(self.state)
        if not driver_merge.groupable(arrow_schema(stored)):
            return None
        hashes = key_hashes if keyed else None
        if keyed and hashes is None and not _read_whole(self._files_between(at, None), DRIVER):
            return None
        rows = self.stored_rows(at, key_hashes=hashes)
        if rows is None:
            return None
        columns = [*self._data_columns, DIFF]
        accumulated = driver_merge.summed(rows.select(columns))
        return local_relation(self.spark, accumulated, StructType([stored[c] for c in columns]))

    def updates_until(
        self,
        at: Time,
        keys: DataFrame,
        key_hashes: Sequence[int] | None,
        placement: Placement = BULK,
    ) -> DataFrame:
        """The updates of ``keys`` at times ``≤ at``, as data columns plus ``_diff``,
        neither consolidated nor always exact (``updates`` with ``exact`` false):
        for a reduction, which joins on the key and sums per key itself, it saves
        a join and an aggregate of every row read, over ``read_at``."""
        self._check_since(at)
        return self.updates(
            keys,
            at,
            key_hashes=key_hashes,
            exact=False,
            placement=placement,
            columns=[*self._data_columns, DIFF],
        )

    def _check_since(self, at: Time | None) -> None:
        if at is not None and not self.state.since.less_equal_time(at):
            raise SinceViolation(self.name, at, self.state.since)

    def _data_and_diff(self, updates: DataFrame) -> DataFrame:
        return sql_text.columns(updates, [*self._data_columns, DIFF])

    @property
    def _data_columns(self) -> list[str]:
        return spark_files.data_schema(self.state).fieldNames()

    @property
    def key_types(self) -> tuple[DataType, ...]:
        """The types the key hash is computed on: two traces' hashes of equal keys
        agree only when these agree, column by column."""
        schema = spark_files.data_schema(self.state)
        return tuple(schema[k].dataType for k in self.state.key)

    def key_hashes_since(self, since: Time) -> list[int]:
        """The sorted distinct key hashes of this trace's updates at times ``≥ since``,
        read from the files of the batches that hold them, in the driver."""
        files = [f for f in self.files() if _may_hold_times_from(f, since, self.state.dims)]
        with phase(LOOKUPS):
            return arrow_files.key_hashes(self.where, files, since)

    def _files_for_keys(
        self, files: list[DataFile], keys: DataFrame, placement: Placement
    ) -> list[DataFile]:
        """The ``files`` that can hold ``keys``, by their hash bounds, where a Spark
        job collecting the keys' hashes costs less than reading them all."""
        if _read_whole(files, placement):
            return files
        if tuple(keys.schema[k].dataType for k in self.state.key) != self.key_types:
            # Equal keys of other types (int and bigint, decimal and double) hash
            # differently, and no cast maps every such key to the stored hash.
            return files
        hashed = f"{spark_files.key_hash(self.state.key)} AS {quote(KEY_HASH)}"
        hashes = sql_text.select(keys, [hashed]).distinct()
        with phase(SPARK):
            probe = [r[0] for r in hashes.limit(KEY_PRUNING_LIMIT + 1).collect()]
        if len(probe) > KEY_PRUNING_LIMIT:
            return files
        probe.sort()
        return [f for f in files if _holds_any(f, probe)]

    # ------------------------------------------------------------ maintenance

    def vacuum(self, retention_hours: float = 24.0) -> list[str]:
        """Delete what no reader of the last ``retention_hours`` can reach: files
        merges removed that long ago, files of attempts that never committed written
        that long ago, and log entries before the latest checkpoint and state.

        Staged files of merges in progress are kept, however old.
        """
        self.reload()
        staged = {f.path for m in self.state.merges for f in m.staged}
        # The Delta log counts retention in whole hours: round up, never delete early.
        unreachable = delta_log.unreferenced(self.where, math.ceil(retention_hours))
        removed = [p for p in sorted(unreachable) if p.startswith("data/") and p not in staged]
        spark_files.remove_files(self.where, removed)
        return removed + delta_log.clean_log(self.where, retention_hours)


def discard_table(where: Location) -> None:
    """Delete a table. On a local disk it is renamed away first (atomic), so a crash
    leaves either all of it or none, never a log without its files. An object store
    cannot rename: the log goes first, newest entries last, then the files, and a
    crash leaves a table that no longer opens; discarding it again finishes."""
    delta_log.forget(where)
    if where.is_local:
        path = where.path
        if path.exists():
            doomed = path.with_name(f".{path.name}.discarded-{uuid.uuid4().hex[:8]}")
            path.rename(doomed)
            shutil.rmtree(doomed)
        return
    fs = where.filesystem
    found = fs.get_file_info(pafs.FileSelector(where.fs_path, recursive=True, allow_not_found=True))
    files = [i.path for i in found if i.type == pafs.FileType.File]
    log = f"{(where / '_delta_log').fs_path}/"
    for path in sorted(files, key=lambda p: (not p.startswith(log), "checkpoint" not in p, p)):
        fs.delete_file(path)


def _holds_any(file: DataFile, sorted_hashes: Sequence[int]) -> bool:
    bounds = hash_bounds(file)
    if bounds is None:
        return True
    lo, hi = bounds
    i = bisect_left(sorted_hashes, lo)
    return i < len(sorted_hashes) and sorted_hashes[i] <= hi


def _time_filter(
    files: Sequence[DataFile], at: Time | None, since: Time | None, dims: int
) -> str | None:
    """The SQL filter that bounds the rows of ``files`` (chosen by their time
    bounds) to times ``≤ at`` and ``≥ since``; None when every file lies within
    the bounds already, as the batches of single intervals do: no epoch literal
    then enters the plan."""
    terms = []
    columns = time_columns(dims)
    for i, c in enumerate(columns):
        bounds = [column_bounds(f, c) for f in files]
        if at is not None and any(b is None or b[1] > at[i] for b in bounds):
            terms.append(f"{quote(c)} <= {at[i]}")
        if since is not None and any(b is None or b[0] < since[i] for b in bounds):
            terms.append(f"{quote(c)} >= {since[i]}")
    return " AND ".join(terms) or None


def _read_whole(files: Sequence[DataFile], placement: Placement) -> bool:
    """Whether a key lookup reads all of ``files`` rather than launch a Spark job
    to find which of them the keys' hashes need."""
    if len(files) <= PRUNING_MIN_FILES:
        return True  # nothing to gain from a Spark job that collects the probe hashes
    records = sum(f.records for f in files)
    return records <= (WHOLE_READ_RECORDS if placement.driver else WHOLE_SCAN_RECORDS)


def _partitioned(df: DataFrame, placement: Placement) -> DataFrame:
    return df.coalesce(1) if placement.driver else df


def _where(df: DataFrame, condition: str | None) -> DataFrame:
    return df if condition is None else df.where(condition)


def _selected(df: DataFrame, columns: Sequence[str] | None) -> DataFrame:
    return df if columns is None else sql_text.columns(df, columns)


def _may_hold_times_from(file: DataFile, since: Time, dims: int) -> bool:
    """A file whose largest value of some time coordinate is below ``since`` holds
    no time ``≥ since``: a run reading the batch it just appended skips the rest."""
    for c, bound in zip(time_columns(dims), since, strict=True):
        b = column_bounds(file, c)
        if b is not None and b[1] < bound:
            return False
    return True


def _may_hold_times_before(file: DataFile, at: Time, dims: int) -> bool:
    """A file whose smallest value of some time coordinate exceeds ``at`` holds no time ≤ ``at``."""
    for c, bound in zip(time_columns(dims), at, strict=True):
        b = column_bounds(file, c)
        if b is not None and b[0] > bound:
            return False
    return True
