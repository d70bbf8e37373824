"""A materialized table's epoch committed by Spark: the view's changes, applied.

The table holds the view with bag semantics: a row of multiplicity 3 is stored
three times, and nothing tells the copies apart, so a change is applied per
distinct row. Over the epochs since the table's last, the view's updates sum to
a net change ``d`` per row:

- every ``d > 0`` adds ``d`` copies: with no ``d < 0`` at all, the commit is a
  plain append;
- a row with ``d < 0`` has all its copies deleted and is inserted again as many
  times as the view holds it at the epoch (zero, for a row of a set), read from
  the view's trace by the row, its key.

That is one MERGE, its source the rows to delete (matched null-safely on every
column) beside the rows to insert (never matched). With deletion vectors on,
Delta marks the deleted rows and keeps the files that hold them: rows and bytes
written follow the change, not the view. A commit that has no changes to apply
(``materialized.py`` says when) writes the view whole, in parallel. Each commit
carries Delta's idempotent-write transaction ``(app id, epoch)`` (Spark skips
one the table has seen) and the epoch in its ``userMetadata``, so time travel
goes back epoch by epoch.

Spark's Delta writer costs seconds and several jobs even for one row, so a small
view's table stays with delta-rs (``delta_table.SinkTable.commit``) until an epoch
needs Spark: the deletion vectors Spark writes then make the table Spark's for
good (``SinkTable.spark_owned``), so the two never write the same table in turn.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from dd_etl.failpoints import failpoint
from dd_etl.profiling import SPARK, count_bytes, phase
from dd_etl.sinks.delta_table import EPOCH_META, SinkTable, SinkWrite
from dd_etl.spark import conf_applied
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF
from dd_etl.trace.spark_files import ROWS_PER_FILE

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
DELETION_VECTORS = "delta.enableDeletionVectors"
OP = "__dd_etl_op"
"""The MERGE source's column saying whether a row deletes (``d``) or inserts (``i``)."""


@dataclass(frozen=True)
class SparkCommit:
    """The commit of ``epoch``: the view ``whole`` (in place of the table's rows), or
    its net changes since the table's last epoch (``changes``: data columns and
    ``_diff``; None: none), with ``current`` reading the view's rows equal to
    given rows at the epoch."""

    spark: SparkSession
    table: SinkTable
    epoch: int
    columns: list[str]
    whole: DataFrame | None
    changes: DataFrame | None
    current: Callable[[DataFrame], DataFrame]
    meta: dict[str, str]

    def commit(self) -> SinkWrite | None:
        done = self.table.epoch()
        if done is not None and done >= self.epoch:
            return None
        self._enable_deletion_vectors()
        failpoint("sink.spark_planned")
        with phase(SPARK):
            if self.whole is not None:
                self._write(self.whole, "overwrite" if self.table.exists() else "append")
            elif self.changes is None:
                self._write(None)
            else:
                self._apply(self.changes)
        failpoint("sink.spark_committed")
        written = self.table.last_write()
        assert written is not None and written.epoch == self.epoch, "Spark skipped the commit"
        count_bytes(written=written.bytes_added)
        return written

    def _enable_deletion_vectors(self) -> None:
        """A table delta-rs created (or wrote while it was small) gets deletion
        vectors before Spark's first commit, in a commit of its own."""
        if self.table.exists() and not self.table.spark_owned():
            self.spark.sql(
                f"ALTER TABLE delta.{quote(self.table.uri)} "
                f"SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')"
            )

    def _write(self, rows: DataFrame | None, mode: str = "append") -> None:
        """Append ``rows`` (None: no rows, a commit that only records the epoch), or
        put them in place of the table's (``mode`` overwrite), creating the table
        with deletion vectors on if it is not there."""
        if rows is None:
            schema = self.table.schema
            assert schema is not None, "a sink commit needs the view's schema"
            rows = self.spark.createDataFrame([], schema)
        writer = rows.write.format("delta").mode(mode).option(DELETION_VECTORS, "true")
        with self._transaction():
            writer.save(self.table.uri)

    def _apply(self, changes: DataFrame) -> None:
        """Apply net changes: an append if no row lost copies, else one MERGE."""
        net = changes.persist()
        try:
            retracted = net.where(F.col(DIFF) < 0).select(*_cols(self.columns))
            added = _copies(net.where(F.col(DIFF) > 0))
            if retracted.isEmpty():
                self._write(added)
                return
            deletes = retracted.withColumn(OP, F.lit("d"))
            inserts = added.unionByName(self.current(retracted)).withColumn(OP, F.lit("i"))
            self._merge(deletes.unionByName(inserts))
        finally:
            net.unpersist()

    def _merge(self, source: DataFrame) -> None:
        spark = self.spark
        name = f"dd_etl_sink_{uuid.uuid4().hex[:12]}"
        source.createOrReplaceTempView(name)
        on = " AND ".join(f"t.{quote(c)} <=> s.{quote(c)}" for c in self.columns)
        names = ", ".join(quote(c) for c in self.columns)
        values = ", ".join(f"s.{quote(c)}" for c in self.columns)
        try:
            with self._transaction():
                spark.sql(
                    f"MERGE INTO delta.{quote(self.table.uri)} AS t USING {name} AS s "
                    f"ON s.{OP} = 'd' AND {on} "
                    "WHEN MATCHED THEN DELETE "
                    f"WHEN NOT MATCHED AND s.{OP} = 'i' THEN INSERT ({names}) VALUES ({values})"
                )
        finally:
            spark.catalog.dropTempView(name)

    def _transaction(self) -> AbstractContextManager[None]:
        """Spark's Delta writes in the block commit ``(app id, epoch)``, which makes
        them idempotent, and the epoch in their ``userMetadata``."""
        metadata = json.dumps({EPOCH_META: str(self.epoch), **self.meta}, sort_keys=True)
        settings = {
            TXN_APP_ID: self.table.app_id,
            TXN_VERSION: str(self.epoch),
            USER_METADATA: metadata,
            MAX_RECORDS_PER_FILE: str(ROWS_PER_FILE),
        }
        return conf_applied(self.spark, settings)


def _copies(rows: DataFrame) -> DataFrame:
    """Each row repeated by its ``_diff`` (positive), without it."""
    data = _cols([c for c in rows.columns if c != DIFF])
    return rows.select(*data, F.explode(F.sequence(F.lit(1), F.col(DIFF)))).select(*data)


def _cols(names: list[str]) -> list[Column]:
    return [F.col(quote(c)) for c in names]
