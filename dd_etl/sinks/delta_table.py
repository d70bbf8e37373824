"""A plain Delta table that dd_etl writes, one atomic commit per epoch.

Spark writes the parquet files (into a fresh directory per attempt, so a crashed
attempt's files are never referenced); delta-rs commits them together with the
application transaction ``(dd_etl/<pipeline>/<view>/<kind>, epoch)``. Before
writing, the table's transaction version tells whether the epoch is already in:
a re-run never writes an epoch twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.failpoints import failpoint

EPOCH_META = "dd_etl.epoch"


class SinkTable:
    def __init__(self, uri: str, app_id: str, schema: StructType | None = None) -> None:
        self.uri = uri
        self.app_id = app_id
        self.schema = schema

    def open(self) -> DeltaTable:
        """The table, created empty with the view's columns if it does not exist yet."""
        if not DeltaTable.is_deltatable(self.uri):
            assert self.schema is not None, "creating a sink table needs its schema"
            Path(self.uri).mkdir(parents=True, exist_ok=True)
            DeltaTable.create(
                self.uri, arrow_schema(self.schema), mode="ignore", name=Path(self.uri).name
            )
        return DeltaTable(self.uri)

    def epoch(self) -> int | None:
        """The last epoch committed to the table, None if none."""
        if not DeltaTable.is_deltatable(self.uri):
            return None
        version = DeltaTable(self.uri).transaction_version(self.app_id)
        return None if version is None else int(version)

    def commit(
        self, epoch: int, rows: DataFrame | None, replace: bool, meta: dict[str, str]
    ) -> bool:
        """Add ``rows`` as the table's data of ``epoch`` (replacing all current data if
        ``replace``), in one commit; False if the epoch was committed before."""
        table = self.open()
        done = table.transaction_version(self.app_id)
        if done is not None and done >= epoch:
            return False
        adds = [] if rows is None else self._write(rows, f"epoch={epoch}-{uuid.uuid4().hex[:8]}")
        failpoint("sink.files_written")
        removes: list[RemoveAction] = []
        now = int(time.time() * 1000)
        if replace:
            current = pa.table(table.get_add_actions(flatten=True)).to_pydict()
            removes = [
                RemoveAction(p, True, now, int(s))
                for p, s in zip(current.get("path", []), current.get("size_bytes", []), strict=True)
            ]
        properties = CommitProperties(
            app_transactions=[Transaction(self.app_id, epoch)],
            custom_metadata={EPOCH_META: str(epoch), **meta},
        )
        actions: Sequence[AddAction | RemoveAction] = [*adds, *removes]
        table.create_write_transaction(
            list(actions), "append", table.schema(), commit_properties=properties
        )
        return True

    def _write(self, rows: DataFrame, directory: str) -> list[AddAction]:
        target = Path(self.uri) / directory
        rows.coalesce(1).write.mode("errorifexists").parquet(str(target))
        now = int(time.time() * 1000)
        adds = []
        for f in sorted(target.glob("*.parquet")):
            records = pq.read_metadata(f).num_rows
            stats = f'{{"numRecords":{records}}}'
            rel = f"{directory}/{f.name}"
            adds.append(AddAction(rel, f.stat().st_size, {}, now, True, stats))
        return adds
