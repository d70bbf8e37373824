"""A plain Delta table that dd_etl writes, one atomic commit per epoch.

The epoch's parquet files go into a fresh directory per attempt, so a crashed
attempt's files are never referenced; delta-rs commits them together with the
application transaction ``(dd_etl/<pipeline>/<view>/<kind>, epoch)``. Before
writing, the table's transaction version tells whether the epoch is already in:
a re-run never writes an epoch twice. Spark writes the files, or the driver
writes rows Spark computed into its hands (``SinkCommit``): one Spark job then
computes the rows of every small sink of a tick, as for a layer's batches.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.failpoints import failpoint
from dd_etl.profiling import SPARK, phase
from dd_etl.trace.arrow_files import collect_each, write_files
from dd_etl.trace.spark_files import ROWS_PER_FILE

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
        self, epoch: int, rows: DataFrame | pa.Table | None, replace: bool, meta: dict[str, str]
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

    def _write(self, rows: DataFrame | pa.Table, directory: str) -> list[AddAction]:
        target = Path(self.uri) / directory
        if isinstance(rows, pa.Table):
            write_files(self.uri, directory, rows, ROWS_PER_FILE)  # the attempt's own directory
        else:
            rows.coalesce(1).write.mode("errorifexists").parquet(str(target))
        now = int(time.time() * 1000)
        adds = []
        for f in sorted(target.glob("*.parquet")):
            records = pq.read_metadata(f).num_rows
            stats = f'{{"numRecords":{records}}}'
            rel = f"{directory}/{f.name}"
            adds.append(AddAction(rel, f.stat().st_size, {}, now, True, stats))
        return adds


@dataclass(frozen=True)
class SinkCommit:
    """A sink's commit of an epoch, planned: the rows it adds (None: none, the
    commit only records the epoch) and whether they replace the table's."""

    table: SinkTable
    epoch: int
    rows: DataFrame | None
    replace: bool
    meta: dict[str, str]

    def commit(self, collected: pa.Table | None = None) -> bool:
        """Commit the epoch, its rows as the driver ``collected`` them when given,
        else written by Spark; False if the epoch was committed before."""
        rows: DataFrame | pa.Table | None = self.rows
        if collected is not None:
            schema = self.table.schema
            rows = collected if schema is None else collected.cast(arrow_schema(schema))
        return self.table.commit(self.epoch, rows, self.replace, self.meta)


def commit_together(commits: Sequence[SinkCommit]) -> list[bool]:
    """Commit each of ``commits`` (whether it wrote, in order): one Spark job computes
    the rows of all of them into the driver, which writes them; a sink of more
    than a file's worth is written by Spark."""
    with_rows = [i for i, c in enumerate(commits) if c.rows is not None]
    frames = [commits[i].rows.coalesce(1) for i in with_rows]  # type: ignore[union-attr]
    with phase(SPARK):
        tables = collect_each(frames, [ROWS_PER_FILE] * len(frames))
    collected = dict(zip(with_rows, tables, strict=True))
    return [c.commit(collected.get(i)) for i, c in enumerate(commits)]
