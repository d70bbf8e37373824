"""A plain Delta table that dd_etl writes, one atomic commit per epoch.

Every commit carries the application transaction ``(dd_etl/<pipeline>/<view>/<kind>,
epoch)``; before writing, the table's transaction version tells whether the epoch
is in already, so a re-run never writes an epoch twice.

Here the driver commits (``delta_commit.py``, with the change files of the
view's changes when the table keeps a change feed): the epoch's parquet files
go into a fresh directory per attempt, so a crashed attempt's files are never
referenced. Spark writes the files, or the driver writes rows Spark computed
into its hands (``SinkCommit``):
one Spark job then computes the rows of every small sink of a tick, as the
batch writer computes a layer's batches (``trace/batch_writer.py``). A
materialized table that needs deletion vectors is Spark's from then on
(``spark_commit.py``, ``SinkLog.spark_owned``).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.errors import SinkError
from dd_etl.failpoints import failpoint
from dd_etl.lake import Where, as_location
from dd_etl.profiling import count_bytes, count_commit
from dd_etl.sinks import delta_commit
from dd_etl.sinks.delta_commit import StoredFile
from dd_etl.sql_text import quote
from dd_etl.trace.arrow_files import write_files
from dd_etl.trace.batch_writer import Computed, Write
from dd_etl.trace.columns import DIFF
from dd_etl.trace.delta_trace import CollectedBatch, PlannedBatch
from dd_etl.trace.job_groups import WriteCost
from dd_etl.trace.spark_files import ROWS_PER_FILE

EPOCH_META = "dd_etl.epoch"
ADDED_META = "dd_etl.rows_added"
REMOVED_META = "dd_etl.rows_removed"
BYTES_META = "dd_etl.bytes_added"
REPLACED_META = "dd_etl.replaced"
VIEW_META = "dd_etl.view"
TRACE_META = "dd_etl.trace"
"""The generation of the view trace an epoch's commit was made from: a rebuild
starts a new one, whose history does not continue what the table holds."""
CHANGE_TYPE = "_change_type"
CHANGE_DIFF = "__dd_etl_change"
"""A change's ``_diff`` where a view's rows and its changes are computed together."""
COMMIT_ATTEMPTS = 5
"""Versions a commit tries before giving up to another writer committing beside it."""
HISTORY_SEARCHED = 100
"""Commits looked through, newest first, for dd_etl's last one."""


@dataclass(frozen=True)
class SinkWrite:
    """What one epoch's commit did to a sink table, as its Delta log tells."""

    epoch: int
    version: int  # the table's Delta version that holds the epoch
    operation: str  # WRITE (the driver, or Spark appending), MERGE (Spark)
    rows_added: int
    rows_removed: int  # by deletion vectors (MERGE) or with the files removed (the driver)
    bytes_added: int  # of the data files added
    replaced: bool  # the commit put its rows in place of all the table's

    @staticmethod
    def from_commit(info: Mapping[str, Any], epoch: int) -> SinkWrite:
        """The write a commit's ``commitInfo`` records: dd_etl's own metadata for
        the driver's commits (and delta-rs's, before them), Delta's operation
        metrics for Spark's."""
        metrics = {k: int(v) for k, v in (info.get("operationMetrics") or {}).items()}
        parameters = info.get("operationParameters") or {}
        replaced = parameters.get("mode") == "Overwrite" or info.get(REPLACED_META) == "true"
        if ADDED_META in info:
            added, removed, size = (int(info[k]) for k in (ADDED_META, REMOVED_META, BYTES_META))
        elif info.get("operation") == "MERGE":
            added = metrics.get("numTargetRowsInserted", 0)
            removed = metrics.get("numTargetRowsDeleted", 0)
            size = metrics.get("numTargetBytesAdded", 0)
        else:  # Spark's WRITE does not count the rows an overwrite removes
            added, removed = metrics.get("numOutputRows", 0), 0
            size = metrics.get("numOutputBytes", 0)
        op = str(info.get("operation", ""))
        return SinkWrite(epoch, int(info["version"]), op, added, removed, size, replaced)


MAINTENANCE = frozenset(
    {"OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "REORG"}
)
"""Operations another writer may commit to a sink table: they leave its rows as they are."""

TABLE_CONFIGURATION = {"delta.checkpointInterval": "10", "delta.enableChangeDataFeed": "true"}
"""A sink table's settings when dd_etl creates it. Checkpoints every 10 commits
(Spark's Delta default; delta-rs's is 100): every open of the table reads the
commits since its last checkpoint, so on a store an epoch's requests would grow
with the table's history for 100 epochs. The change data feed on: a reader of
the table (another pipeline among them) takes an epoch's changes from the
commit, not by comparing snapshots."""


class SinkLog:
    """A sink table's Delta log as one read found it: a tick reads it once per sink,
    to check the table, plan its commit and report what it wrote, rather than open
    the log for each question."""

    def __init__(self, table: DeltaTable, app_id: str) -> None:
        self.table = table
        version = table.transaction_version(app_id)
        self.epoch = None if version is None else int(version)
        """The last epoch committed to the table, None before the first."""

    @property
    def spark_owned(self) -> bool:
        """Whether Spark commits the table: it has deletion vectors, which Spark
        wrote and dd_etl's own commits can neither write nor name in the files they
        remove, or another setting those do not keep (``delta_commit.writable``)."""
        return not delta_commit.writable(self.table)

    @functools.cached_property
    def history(self) -> list[dict[str, Any]]:
        """The newest commits, newest first."""
        return self.table.history(HISTORY_SEARCHED)

    def stored_bytes(self) -> int:
        """What the table's data files hold, in bytes (no Spark job)."""
        files = pa.table(self.table.get_add_actions(flatten=True))
        return int(pc.sum(files.column("size_bytes")).as_py() or 0)

    def rows_overlapping(self, column: str, low: Any, high: Any) -> int:
        """Rows of the files whose statistics of ``column`` may hold a value in
        ``[low, high]`` (every file without them), deleted rows included: what a
        scan bounded by that range reads. No Spark job."""
        files = pa.table(self.table.get_add_actions(flatten=True)).to_pydict()
        rows = files["num_records"]
        lows = files.get(f"min.{column}", [None] * len(rows))
        highs = files.get(f"max.{column}", [None] * len(rows))
        return sum(
            n or 0
            for n, lo, hi in zip(rows, lows, highs, strict=True)
            if lo is None or hi is None or (lo <= high and hi >= low)
        )

    def last_write(self) -> SinkWrite | None:
        """The last epoch's commit (no Spark job)."""
        info = self._last_commit()
        if info is None or self.epoch is None:
            return None
        return SinkWrite.from_commit(info, self.epoch)

    def last_meta(self) -> dict[str, str]:
        """The metadata dd_etl recorded with the last epoch's commit."""
        info = self._last_commit()
        return {} if info is None else commit_meta(info)

    def _last_commit(self) -> dict[str, Any] | None:
        if self.epoch is None:
            return None
        return next((i for i in self.history if committed_epoch(i) == self.epoch), None)


class SinkTable:
    """The sink ``kind`` (``materialize`` or ``changes``) of ``view`` in ``pipeline``."""

    def __init__(
        self,
        where: Where,
        pipeline: str,
        view: str,
        kind: str,
        schema: StructType | None = None,
    ) -> None:
        self.where = as_location(where)
        self.view = view
        self.kind = kind
        self.app_id = f"dd_etl/{pipeline}/{view}/{kind}"
        self.schema = schema

    @property
    def _marker(self) -> str:
        """The description of a table dd_etl created, before its first epoch."""
        return f"{self.app_id} (written by dd_etl)"

    def open(self) -> DeltaTable:
        """The table, created empty with the view's columns if it does not exist yet."""
        table = self._existing()
        if table is not None:
            return table
        assert self.schema is not None, "creating a sink table needs its schema"
        self.where.make_directory()
        DeltaTable.create(
            self.where.uri,
            arrow_schema(self.schema),
            mode="ignore",
            name=self.where.name,
            description=self._marker,
            storage_options=self.where.delta_options,
            configuration=TABLE_CONFIGURATION,
        )
        return self._table()

    def _table(self) -> DeltaTable:
        return DeltaTable(self.where.uri, storage_options=self.where.delta_options)

    def _existing(self) -> DeltaTable | None:
        """The table as of now, None when there is none: one read of its log (asking
        first whether it exists would read it twice)."""
        try:
            return self._table()
        except TableNotFoundError:
            return None

    def columns_differ(self) -> bool:
        """Whether the table exists with other columns (names or types) than the view's:
        the view's rows no longer fit it."""
        if self.schema is None or (table := self._existing()) is None:
            return False
        held = StructType.fromJson(json.loads(table.schema().to_json()))
        return [(f.name, f.dataType) for f in held] != [(f.name, f.dataType) for f in self.schema]

    def epoch(self) -> int | None:
        """The last epoch committed to the table, None if none."""
        log = self.log()
        return None if log is None else log.epoch

    def log(self) -> SinkLog | None:
        """The table's Delta log as of now, None if there is no table."""
        table = self._existing()
        return None if table is None else SinkLog(table, self.app_id)

    def check_ours(self) -> None:
        """Refuse a table dd_etl did not create, or one another writer changed the rows
        of since dd_etl's last commit: dd_etl would silently undo or build on them."""
        log = self.log()
        if log is None:
            return
        if log.epoch is None:
            if log.table.metadata().description != self._marker:
                raise SinkError(
                    self.view,
                    self.kind,
                    self.where.uri,
                    "holds a Delta table dd_etl did not create; point the sink at a new "
                    "path, or move that table away",
                )
            return
        for info in log.history:
            if committed_epoch(info) is not None:
                return  # dd_etl's last commit: nothing foreign after it
            operation = str(info.get("operation", ""))
            if operation not in MAINTENANCE:
                raise SinkError(
                    self.view,
                    self.kind,
                    self.where.uri,
                    f"was written by another writer after dd_etl's last commit (version "
                    f"{info['version']}: {operation}); move the table away or delete it, and "
                    "the next run writes it again whole",
                )

    def commit(
        self,
        epoch: int,
        rows: DataFrame | pa.Table | None,
        replace: bool,
        meta: dict[str, str],
        changes: DataFrame | pa.Table | None = None,
    ) -> SinkWrite | None:
        """Add ``rows`` as the table's data of ``epoch`` (in place of all its current
        data if ``replace``) in one commit, with ``changes`` (the view's net changes
        since the table's last epoch: its columns and ``_diff``) as the commit's
        change files when the table keeps a change feed; None if the epoch was
        committed before."""
        table = self.open()
        done = table.transaction_version(self.app_id)
        if done is not None and done >= epoch:
            return None
        if not delta_commit.writable(table):
            raise SinkError(
                self.view,
                self.kind,
                self.where.uri,
                "has settings dd_etl does not write by (column mapping, constraints, generated "
                "columns or append-only); move the table away, and the next run writes it "
                "again whole",
            )
        attempt = f"epoch={epoch}-{uuid.uuid4().hex[:8]}"
        added = [] if rows is None else self._write(rows, attempt)
        changed = []
        if changes is not None and delta_commit.feed_on(table):
            changed = self._write(_feed_rows(changes), f"{delta_commit.CHANGE_DATA}/{attempt}")
        failpoint("sink.files_written")
        for _ in range(COMMIT_ATTEMPTS):
            removed = _files(table) if replace else []
            rows_added, rows_removed = (sum(f.records for f in files) for files in (added, removed))
            size = sum(f.size for f in added)
            written = {
                ADDED_META: str(rows_added),
                REMOVED_META: str(rows_removed),
                BYTES_META: str(size),
                REPLACED_META: str(replace).lower(),
            }
            info = {EPOCH_META: str(epoch), **meta, **written}
            actions = delta_commit.Actions(added, removed, changed, replace)
            if delta_commit.commit(self.where, table, actions, (self.app_id, epoch), info):
                count_bytes(written=size + sum(f.size for f in changed))
                count_commit()
                version = table.version()
                return SinkWrite(epoch, version, "WRITE", rows_added, rows_removed, size, replace)
            # another writer took the version: a maintenance commit, or this very
            # commit whose answer was lost and which the store client sent again
            table.update_incremental()
            log = SinkLog(table, self.app_id)
            if log.epoch is not None and log.epoch >= epoch:
                return log.last_write()
        raise SinkError(
            self.view,
            self.kind,
            self.where.uri,
            f"another writer committed to the table {COMMIT_ATTEMPTS} times while dd_etl "
            "committed its epoch; run again once it is done",
        )

    def _write(self, rows: DataFrame | pa.Table, directory: str) -> list[StoredFile]:
        """Parquet files of ``rows`` in ``directory``. Spark writes a DataFrame's
        partitions in parallel."""
        if isinstance(rows, pa.Table):
            write_files(self.where, directory, rows, ROWS_PER_FILE)  # the attempt's own directory
        else:
            writer = rows.write.option("maxRecordsPerFile", ROWS_PER_FILE)
            writer.mode("error").parquet((self.where / directory).spark)
        written = []
        fs = self.where.filesystem
        found = fs.get_file_info(
            pafs.FileSelector((self.where / directory).fs_path, allow_not_found=True)
        )
        for info in sorted(found, key=lambda i: i.path):
            if not info.base_name.endswith(".parquet"):
                continue
            with fs.open_input_file(info.path) as stream:
                records = pq.read_metadata(stream).num_rows
            written.append(StoredFile(f"{directory}/{info.base_name}", info.size, records))
        return written


def _files(table: DeltaTable) -> list[StoredFile]:
    """The table's data files as of its version."""
    current = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    return [
        StoredFile(str(p), int(s), int(n or 0))
        for p, s, n in zip(
            current.get("path", []),
            current.get("size_bytes", []),
            current.get("num_records", []),
            strict=True,
        )
    ]


def _feed_rows(changes: DataFrame | pa.Table) -> DataFrame | pa.Table:
    """Net changes (columns and ``_diff``) as a change feed's rows: a change of ``d``
    is ``|d|`` rows, inserted for ``d > 0``, deleted for ``d < 0``."""
    if isinstance(changes, pa.Table):
        diffs = changes.column(DIFF).to_pylist()
        each = [(i, d) for i, d in enumerate(diffs) for _ in range(abs(d))]
        kinds = pa.array(["insert" if d > 0 else "delete" for _, d in each], pa.string())
        taken = changes.drop_columns([DIFF]).take(pa.array([i for i, _ in each], pa.int64()))
        return taken.append_column(CHANGE_TYPE, kinds)
    data = [F.col(quote(c)) for c in changes.columns if c != DIFF]
    kind = F.when(F.col(DIFF) > 0, "insert").otherwise("delete").alias(CHANGE_TYPE)
    copies = F.explode(F.sequence(F.lit(1), F.abs(F.col(DIFF))))
    return changes.select(*data, kind, copies).select(*data, CHANGE_TYPE)


def committed_epoch(info: Mapping[str, Any]) -> int | None:
    """The epoch a sink commit holds, None for a commit dd_etl did not make."""
    epoch = commit_meta(info).get(EPOCH_META)
    return None if epoch is None else int(epoch)


def commit_meta(info: Mapping[str, Any]) -> dict[str, str]:
    """What dd_etl recorded with a sink commit, from its ``commitInfo``: the driver's
    commits carry it as fields of their own, Spark's in ``userMetadata`` (JSON)."""
    user = info.get("userMetadata")
    if isinstance(user, str) and user.startswith("{"):
        recorded = json.loads(user)
        if isinstance(recorded, dict) and EPOCH_META in recorded:
            return {str(k): str(v) for k, v in recorded.items()}
    return {k: str(v) for k, v in info.items() if k.startswith("dd_etl.")}


@dataclass(frozen=True)
class SinkCommit:
    """A sink's commit of an epoch, planned: the rows it adds (None: none, the
    commit only records the epoch), whether they replace the table's, and the
    view's net changes its change files hold (None: the rows added say them). Its
    rows are written by the driver where a shared Spark job computes them into
    its hands (``batch_writer``), else by Spark."""

    table: SinkTable
    epoch: int
    rows: DataFrame | None
    replace: bool
    meta: dict[str, str]
    changes: DataFrame | None = None

    def to_collect(self) -> PlannedBatch | None:
        if self.rows is None:
            return None
        return PlannedBatch.as_they_are(self._together(self.rows), ROWS_PER_FILE)

    def _together(self, rows: DataFrame) -> DataFrame:
        """The rows, and the changes after them, told apart by ``CHANGE_DIFF``
        (null for a row): one Spark job computes both into the driver."""
        if self.changes is None:
            return rows
        diff = F.col(DIFF).cast("long").alias(CHANGE_DIFF)
        data = [F.col(quote(c)) for c in rows.columns]
        return rows.select(*data, F.lit(None).cast("long").alias(CHANGE_DIFF)).unionByName(
            self.changes.select(*data, diff)
        )

    def to_write_on_executors(self) -> None:
        return None

    @property
    def cost(self) -> WriteCost:
        return WriteCost()

    def commit(self, computed: Computed | None = None) -> SinkWrite | None:
        """Commit the epoch, its rows as the driver collected them when given, else
        written by Spark; None if the epoch was committed before."""
        if not isinstance(computed, CollectedBatch):
            return self.table.commit(self.epoch, self.rows, self.replace, self.meta, self.changes)
        rows = computed.rows
        changes = None
        if self.changes is not None:
            diffs = rows.column(CHANGE_DIFF)
            changes = rows.filter(pc.is_valid(diffs)).rename_columns(
                [*rows.column_names[:-1], DIFF]
            )
            rows = rows.filter(pc.is_null(diffs)).drop_columns([CHANGE_DIFF])
        if (schema := self.table.schema) is not None:
            types = arrow_schema(schema)
            rows = rows.cast(types)
            if changes is not None:
                changes = changes.cast(types.append(pa.field(DIFF, pa.int64())))
        return self.table.commit(self.epoch, rows, self.replace, self.meta, changes)


EpochCommit = Write[SinkWrite | None]
"""A sink's commit of an epoch, planned: ``commit`` makes it (None: the epoch was
committed before)."""
