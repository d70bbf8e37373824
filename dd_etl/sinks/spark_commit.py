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
column) beside the rows to insert (never matched). A view with a unique key (a
GROUP BY's columns, ``plan.graph.unique_key``) holds a row once and no other row
with its key, so its rows are matched by the key alone, which is all a MERGE
then reads of the table to find them, and a retracted row has no copies left
to look up. The table's whole writes are laid out in the order of the match
columns, and the MERGE bounds the first by the range its deleted rows span, so
it reads only the files that can hold them; when those files are many and the
rows few, it names their values too, so it reads only the pages that can hold
them (``_within``). With deletion vectors on,
Delta marks the deleted rows and keeps the files that hold them: rows and bytes
written follow the change, not the view. A commit that has no changes to apply
(``materialized.py`` says when) writes the view whole, in parallel. Each commit
carries Delta's idempotent-write transaction ``(app id, epoch)`` (Spark skips
one the table has seen) and the epoch in its ``userMetadata``, so time travel
goes back epoch by epoch.

Spark's Delta writer costs seconds and several jobs even for one row, so a small
view's table stays with the driver's commits (``delta_table.SinkTable.commit``) until an epoch
needs Spark: the deletion vectors Spark writes then make the table Spark's for
good (``SinkLog.spark_owned``), so the two never write the same table in turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, TypeGuard

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DateType, DecimalType, IntegralType, StringType

from dd_etl.failpoints import failpoint
from dd_etl.profiling import SPARK, count_bytes, count_commit, phase
from dd_etl.sinks.delta_table import EPOCH_META, SinkLog, SinkTable, SinkWrite
from dd_etl.spark import conf_applied
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF
from dd_etl.trace.job_groups import WriteCost
from dd_etl.trace.spark_files import ROWS_PER_FILE

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
MAX_RECORDS_PER_FILE = "spark.sql.files.maxRecordsPerFile"
DELETION_VECTORS = "delta.enableDeletionVectors"
NAMED_KEYS = 10_000
"""The most distinct values of the first match column an epoch's retracted rows
may have for its MERGE to name them (``_within``): they pass through the driver
into the plan, as literals; a larger change is bounded by their range alone."""
NAMED_FROM_ROWS = 2_000_000
"""Values are named only when the files their range overlaps hold more rows than
this. Naming 1,000 values cost a MERGE about 1 s more, while each million rows
of files read whole to find deleted rows cost it about 0.8 s (1 M and 10 M row
tables, ``bench/bench_sink.py``)."""
PAGE_FILTER_VALUES = "spark.sql.parquet.pushdown.inFilterThreshold"
RANGED_TYPES = (IntegralType, DecimalType, StringType, DateType)
"""Types of a first match column whose range bounds a MERGE (values that come back
from the driver exactly as they were, and order there as in Spark; timestamps
pass through time zones, and strings of another collation than binary are
ordered otherwise: ``_ranged``)."""
OP = "__dd_etl_op"
"""The MERGE source's column saying whether a row deletes (``d``) or inserts (``i``)."""


@dataclass(frozen=True)
class SparkCommit:
    """The commit of ``epoch``: the view ``whole`` (in place of the table's rows), or
    its net changes since the table's last epoch (``changes``: data columns and
    ``_diff``; None: none), with ``current`` reading the view's rows equal to
    given rows at the epoch, unless the view has a unique ``key``."""

    spark: SparkSession
    table: SinkTable
    log: SinkLog | None  # the table's as the commit was planned; None: no table yet
    epoch: int
    columns: list[str]
    key: tuple[str, ...] | None
    whole: DataFrame | None
    changes: DataFrame | None
    current: Callable[[DataFrame], DataFrame]
    meta: dict[str, str]

    def to_collect(self) -> None:
        return None  # Spark writes and commits: no rows for the driver

    def to_write_on_executors(self) -> None:
        return None

    @property
    def cost(self) -> WriteCost:
        return WriteCost()

    def commit(self, computed: object = None) -> SinkWrite:
        self._enable_deletion_vectors()
        failpoint("sink.spark_planned")
        with phase(SPARK):
            if self.whole is not None:
                order = _cols(self._matched_by)
                whole = self.whole.repartitionByRange(*order).sortWithinPartitions(*order)
                self._write(whole, "append" if self.log is None else "overwrite")
            elif self.changes is None:
                self._write(None)
            else:
                self._apply(self.changes)
        failpoint("sink.spark_committed")
        log = self.table.log()
        written = None if log is None else log.last_write()
        assert written is not None and written.epoch == self.epoch, "Spark skipped the commit"
        count_bytes(written=written.bytes_added)
        count_commit()
        return written

    def _enable_deletion_vectors(self) -> None:
        """A table the driver created (or wrote while it was small) gets deletion
        vectors before Spark's first commit, in a commit of its own."""
        if self.log is not None and not self.log.spark_owned:
            self.spark.sql(
                f"ALTER TABLE delta.{quote(self.table.where.spark)} "
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
            writer.save(self.table.where.spark)

    @property
    def _matched_by(self) -> list[str]:
        """The columns a row is found by in the table, in the order its whole writes
        are laid out in."""
        return list(self.key or self.columns)

    def _apply(self, changes: DataFrame) -> None:
        """Apply net changes: an append if no row lost copies, else one MERGE."""
        net = changes.persist()
        try:
            retracted = net.where(F.col(DIFF) < 0).select(*_cols(self.columns))
            added = _copies(net.where(F.col(DIFF) > 0))
            distinct = retracted.select(quote(self._matched_by[0])).distinct()
            named = [r[0] for r in distinct.limit(NAMED_KEYS + 1).collect()]
            if not named:
                self._write(added)
                return
            deletes = retracted.withColumn(OP, F.lit("d"))
            if self.key is None:
                added = added.unionByName(self.current(retracted))
            source = deletes.unionByName(added.withColumn(OP, F.lit("i")))
            self._merge(source, self._within(retracted, named))
        finally:
            net.unpersist()

    def _within(self, retracted: DataFrame, named: list[Any]) -> Column:
        """A condition on the table's rows that holds for every row the MERGE deletes,
        on the first match column, given the retracted rows' distinct values of it
        (``NAMED_KEYS`` and one more, if there are more): the range they span, by
        which Delta skips the files whose statistics lie outside it (a change to a
        narrow range, recent dates or new ids, reads the files that hold that
        range), and, for at most ``NAMED_KEYS`` values whose range overlaps files
        of more than ``NAMED_FROM_ROWS`` rows, the values themselves, by which
        Parquet skips the pages that hold none of them (a change spread over every
        file reads, to mark its rows deleted, the pages that hold them). Only for
        ``RANGED_TYPES``, whose values come back from the driver exactly."""
        name = quote(self._matched_by[0])
        schema = self.table.schema
        kind = None if schema is None else schema[self._matched_by[0]].dataType
        if not _ranged(kind):
            return F.lit(True)
        column = F.col(name)
        values = [v for v in named if v is not None]
        if len(named) <= NAMED_KEYS:
            low, high = (min(values), max(values)) if values else (None, None)
            nulls = len(values) < len(named)
        else:
            found = retracted.agg(F.min(name), F.max(name), F.max(F.col(name).isNull())).first()
            assert found is not None
            low, high, nulls = found
        if low is None:
            within = F.lit(False)
        else:
            within = column.between(F.lit(low).cast(kind), F.lit(high).cast(kind))
            if len(named) <= NAMED_KEYS and self._spans_many_rows(low, high):
                within &= column.isin([F.lit(v).cast(kind) for v in values])
        return within | column.isNull() if nulls else within

    def _spans_many_rows(self, low: Any, high: Any) -> bool:
        """Whether the table's files that ``[low, high]`` of the first match column
        overlaps hold more than ``NAMED_FROM_ROWS`` rows."""
        if self.log is None:
            return False
        return self.log.rows_overlapping(self._matched_by[0], low, high) > NAMED_FROM_ROWS

    def _merge(self, source: DataFrame, within: Column) -> None:
        """Delete the source's ``d`` rows from the table, insert its ``i`` rows. The
        source's columns are renamed apart from the table's, so neither side needs
        a qualifier (``DataFrame.mergeInto`` names the table, aliasing neither: it
        runs the same on a classic session and over Spark Connect)."""
        renamed = {c: f"__source_{i}" for i, c in enumerate(self.columns)}
        source = source.select(
            *[F.col(quote(c)).alias(r) for c, r in renamed.items()], F.col(quote(OP))
        )
        found = F.col(quote(OP)) == "d"
        for c in self._matched_by:
            found &= F.col(quote(c)).eqNullSafe(F.col(renamed[c]))
        values = {quote(c): F.col(r) for c, r in renamed.items()}
        with self._transaction():
            (
                source.mergeInto(f"delta.{quote(self.table.where.spark)}", found & within)
                .whenMatched()
                .delete()
                .whenNotMatched(F.col(quote(OP)) == "i")
                .insert(values)
                .merge()
            )

    def _transaction(self) -> AbstractContextManager[None]:
        """Spark's Delta writes in the block commit ``(app id, epoch)``, which makes
        them idempotent, and the epoch in their ``userMetadata``."""
        metadata = json.dumps({EPOCH_META: str(self.epoch), **self.meta}, sort_keys=True)
        settings = {
            TXN_APP_ID: self.table.app_id,
            TXN_VERSION: str(self.epoch),
            USER_METADATA: metadata,
            MAX_RECORDS_PER_FILE: str(ROWS_PER_FILE),
            # Parquet checks a page against each named value, not their range only.
            PAGE_FILTER_VALUES: str(NAMED_KEYS),
        }
        return conf_applied(self.spark, settings)


def _ranged(kind: DataType | None) -> TypeGuard[DataType]:
    if isinstance(kind, StringType):
        return kind == StringType()  # binary collation: Python's order of str
    return isinstance(kind, RANGED_TYPES)


def _copies(rows: DataFrame) -> DataFrame:
    """Each row repeated by its ``_diff`` (positive), without it."""
    data = _cols([c for c in rows.columns if c != DIFF])
    return rows.select(*data, F.explode(F.sequence(F.lit(1), F.col(DIFF)))).select(*data)


def _cols(names: list[str]) -> list[Column]:
    return [F.col(quote(c)) for c in names]
