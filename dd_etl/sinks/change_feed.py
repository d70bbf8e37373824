"""``changes:``: a Delta table of a view's changes, ``(columns…, _epoch, _diff)``.

Append-only: each epoch adds the view's consolidated changes at that epoch in one
commit (several epochs at once if the table fell behind), so consumers can read
it incrementally like any Delta table. Summed, its rows are the view as of its
last epoch, whatever happened to the view's trace: after a rebuild started the
trace over, the next epoch's rows are the difference between the view now and
what the feed published, not the new trace's history.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.lake import Where
from dd_etl.operators import linear
from dd_etl.runtime import Runtime
from dd_etl.sinks.delta_table import TRACE_META, VIEW_META, SinkCommit, SinkTable
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.placement import BULK, Placement

EPOCH_COLUMN = "_epoch"
DIFF_COLUMN = "_diff"


class ChangeFeed:
    def __init__(self, runtime: Runtime, pipeline: str, view: str, where: Where) -> None:
        self.runtime = runtime
        self.view = view
        node = runtime.flow.views[view]
        schema = StructType(
            [
                *node.schema.fields,
                StructField(EPOCH_COLUMN, LongType(), False),
                StructField(DIFF_COLUMN, LongType(), False),
            ]
        )
        self.columns = node.columns
        self.table = SinkTable(where, pipeline, view, "changes", schema)

    def plan(self, epoch: int, placement: Placement = BULK) -> SinkCommit | None:
        """The commit of the view's changes up to ``epoch`` (None: there already),
        read as ``placement`` says."""
        log = self.table.log()
        last = None if log is None else log.epoch
        if last is not None and last >= epoch:
            return None
        trace = self.runtime.trace(self.runtime.flow.views[self.view])
        # commits made before feeds recorded the trace's generation are taken to follow it
        made_from = trace.generation if log is None else log.last_meta().get(TRACE_META)
        if made_from in (None, trace.generation):
            start = 0 if last is None else last + 1
            changes = self.runtime.changes(self.view, start, epoch + 1, placement)
        else:
            changes = self._catching_up(epoch, placement)
        rows = changes.select(
            *self.columns,
            F.col(TIME).cast("long").alias(EPOCH_COLUMN),
            F.col(DIFF).cast("long").alias(DIFF_COLUMN),
        )
        meta = {VIEW_META: self.view, TRACE_META: trace.generation}
        return SinkCommit(self.table, epoch, rows, replace=False, meta=meta)

    def _catching_up(self, epoch: int, placement: Placement) -> DataFrame:
        """The rows that take what the feed published to the view as of ``epoch``,
        at ``epoch``: the view's trace was started over (a rebuild), so its history
        is not the one the feed published."""
        trace = self.runtime.trace(self.runtime.flow.views[self.view])
        now = trace.read_at((epoch,), placement=placement)
        published = self.runtime.spark.read.format("delta").load(self.table.where.spark)
        published = published.select(*self.columns, F.col(DIFF_COLUMN).alias(DIFF))
        difference = linear.consolidate(now.unionByName(linear.negate(published)))
        return difference.withColumn(TIME, F.lit(epoch).cast("long"))
