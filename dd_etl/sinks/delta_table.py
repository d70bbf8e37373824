"""A plain Delta table that dd_etl writes, one atomic commit per epoch.

Every commit carries the application transaction ``(dd_etl/<pipeline>/<view>/<kind>,
epoch)``; before writing, the table's transaction version tells whether the epoch
is in already, so a re-run never writes an epoch twice.

Here delta-rs commits: the epoch's parquet files go into a fresh directory per
attempt, so a crashed attempt's files are never referenced. Spark writes the
files, or the driver writes rows Spark computed into its hands (``SinkCommit``):
one Spark job then computes the rows of every small sink of a tick, as the
batch writer computes a layer's batches (``trace/batch_writer.py``). A
materialized table that needs deletion vectors is Spark's from then on
(``spark_commit.py``, ``SinkLog.spark_owned``).
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.errors import SinkError
from dd_etl.failpoints import failpoint
from dd_etl.lake import Where, as_location
from dd_etl.profiling import count_bytes, count_commit
from dd_etl.trace.arrow_files import write_files
from dd_etl.trace.batch_writer import Computed, Write
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
HISTORY_SEARCHED = 100
"""Commits looked through, newest first, for dd_etl's last one."""


@dataclass(frozen=True)
class SinkWrite:
    """What one epoch's commit did to a sink table, as its Delta log tells."""

    epoch: int
    version: int  # the table's Delta version that holds the epoch
    operation: str  # WRITE (delta-rs, or Spark appending), MERGE (Spark)
    rows_added: int
    rows_removed: int  # by deletion vectors (MERGE) or with the files removed (delta-rs)
    bytes_added: int  # of the data files added
    replaced: bool  # the commit put its rows in place of all the table's

    @staticmethod
    def from_commit(info: Mapping[str, Any], epoch: int) -> SinkWrite:
        """The write a commit's ``commitInfo`` records: dd_etl's own metadata for
        delta-rs commits, Delta's operation metrics for Spark's."""
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
        wrote and delta-rs can neither write nor name in the files it removes."""
        return "deletionVectors" in (self.table.protocol().writer_features or [])

    @functools.cached_property
    def history(self) -> list[dict[str, Any]]:
        """The newest commits, newest first."""
        return self.table.history(HISTORY_SEARCHED)

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
        self, epoch: int, rows: DataFrame | pa.Table | None, replace: bool, meta: dict[str, str]
    ) -> SinkWrite | None:
        """Add ``rows`` as the table's data of ``epoch`` (replacing all current data if
        ``replace``), in one commit; None if the epoch was committed before."""
        table = self.open()
        done = table.transaction_version(self.app_id)
        if done is not None and done >= epoch:
            return None
        adds: list[AddAction] = []
        added = 0
        if rows is not None:
            adds, added = self._write(rows, f"epoch={epoch}-{uuid.uuid4().hex[:8]}")
        failpoint("sink.files_written")
        removes: list[RemoveAction] = []
        removed = 0
        now = int(time.time() * 1000)
        if replace:
            current = pa.table(table.get_add_actions(flatten=True)).to_pydict()
            removes = [
                RemoveAction(p, True, now, int(s))
                for p, s in zip(current.get("path", []), current.get("size_bytes", []), strict=True)
            ]
            removed = sum(int(r or 0) for r in current.get("num_records", []))
        size = sum(a.size for a in adds)
        written = {
            ADDED_META: str(added),
            REMOVED_META: str(removed),
            BYTES_META: str(size),
            REPLACED_META: str(replace).lower(),
        }
        properties = CommitProperties(
            app_transactions=[Transaction(self.app_id, epoch)],
            custom_metadata={EPOCH_META: str(epoch), **meta, **written},
        )
        actions: Sequence[AddAction | RemoveAction] = [*adds, *removes]
        table.create_write_transaction(
            list(actions), "append", table.schema(), commit_properties=properties
        )
        count_bytes(written=size)
        count_commit()
        table.update_incremental()
        return SinkWrite(epoch, table.version(), "WRITE", added, removed, size, replace)

    def _write(self, rows: DataFrame | pa.Table, directory: str) -> tuple[list[AddAction], int]:
        """Parquet files of ``rows`` in ``directory``, as actions adding them, and
        their row count. Spark writes a DataFrame's partitions in parallel."""
        if isinstance(rows, pa.Table):
            write_files(self.where, directory, rows, ROWS_PER_FILE)  # the attempt's own directory
        else:
            writer = rows.write.option("maxRecordsPerFile", ROWS_PER_FILE)
            writer.mode("error").parquet((self.where / directory).spark)
        now = int(time.time() * 1000)
        adds = []
        total = 0
        fs = self.where.filesystem
        found = fs.get_file_info(
            pafs.FileSelector((self.where / directory).fs_path, allow_not_found=True)
        )
        for info in sorted(found, key=lambda i: i.path):
            if not info.base_name.endswith(".parquet"):
                continue
            with fs.open_input_file(info.path) as stream:
                records = pq.read_metadata(stream).num_rows
            total += records
            stats = f'{{"numRecords":{records}}}'
            adds.append(AddAction(f"{directory}/{info.base_name}", info.size, {}, now, True, stats))
        return adds, total


def committed_epoch(info: Mapping[str, Any]) -> int | None:
    """The epoch a sink commit holds, None for a commit dd_etl did not make."""
    epoch = commit_meta(info).get(EPOCH_META)
    return None if epoch is None else int(epoch)


def commit_meta(info: Mapping[str, Any]) -> dict[str, str]:
    """What dd_etl recorded with a sink commit, from its ``commitInfo``: delta-rs
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
    commit only records the epoch) and whether they replace the table's. Its
    rows are written by the driver where a shared Spark job computes them into
    its hands (``batch_writer``), else by Spark."""

    table: SinkTable
    epoch: int
    rows: DataFrame | None
    replace: bool
    meta: dict[str, str]

    def to_collect(self) -> PlannedBatch | None:
        return None if self.rows is None else PlannedBatch.as_they_are(self.rows, ROWS_PER_FILE)

    def to_write_on_executors(self) -> None:
        return None

    @property
    def cost(self) -> WriteCost:
        return WriteCost()

    def commit(self, computed: Computed | None = None) -> SinkWrite | None:
        """Commit the epoch, its rows as the driver collected them when given, else
        written by Spark; None if the epoch was committed before."""
        rows: DataFrame | pa.Table | None = self.rows
        if isinstance(computed, CollectedBatch):
            schema = self.table.schema
            rows = computed.rows if schema is None else computed.rows.cast(arrow_schema(schema))
        return self.table.commit(self.epoch, rows, self.replace, self.meta)


EpochCommit = Write[SinkWrite | None]
"""A sink's commit of an epoch, planned: ``commit`` makes it (None: the epoch was
committed before)."""
