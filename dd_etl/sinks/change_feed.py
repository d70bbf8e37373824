"""``changes:``: a Delta table of a view's changes, ``(columns…, _epoch, _diff)``.

Append-only: each epoch adds the view's consolidated changes at that epoch in one
commit (several epochs at once if the table fell behind), so consumers can read
it incrementally like any Delta table.
"""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.runtime import Runtime
from dd_etl.sinks.delta_table import SinkCommit, SinkTable
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.placement import BULK, Placement

EPOCH_COLUMN = "_epoch"
DIFF_COLUMN = "_diff"


class ChangeFeed:
    def __init__(self, runtime: Runtime, pipeline: str, view: str, uri: str) -> None:
        self.runtime = runtime
        self.view = view
        self.uri = uri
        node = runtime.flow.views[view]
        schema = StructType(
            [
                *node.schema.fields,
                StructField(EPOCH_COLUMN, LongType(), False),
                StructField(DIFF_COLUMN, LongType(), False),
            ]
        )
        self.columns = node.columns
        self.table = SinkTable(uri, pipeline, view, "changes", schema)

    def plan(self, epoch: int, placement: Placement = BULK) -> SinkCommit | None:
        """The commit of the view's changes up to ``epoch`` (None: there already),
        read as ``placement`` says."""
        last = self.table.epoch()
        if last is not None and last >= epoch:
            return None
        start = 0 if last is None else last + 1
        changes = self.runtime.changes(self.view, start, epoch + 1, placement).select(
            *self.columns,
            F.col(TIME).cast("long").alias(EPOCH_COLUMN),
            F.col(DIFF).cast("long").alias(DIFF_COLUMN),
        )
        return SinkCommit(
            self.table, epoch, changes, replace=False, meta={"dd_etl.view": self.view}
        )
