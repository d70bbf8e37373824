"""``materialize:``: a plain Delta table equal to a view's contents, kept current.

Bag semantics (a row with multiplicity 3 is stored three times), in the order
of the view's columns, readable by any Delta reader. Each epoch is one atomic
commit, so Delta time travel goes back epoch by epoch: the commit's
``dd_etl.epoch`` says which. A view of a small interval's size is rewritten
whole by the driver (one file, milliseconds), one of up to the pipeline's
``sizing.rewrite_records`` (``Thresholds`` in ``runtime/sizing.py``) by Spark
(in parallel, committed by the driver); either commit has change files of the
view's changes, so the table's change feed says what the view changed. A
larger view's table takes the view's changes, applied by Spark with deletion
vectors (``spark_commit.py``): what an epoch writes follows its change, not the
view.
When the view's trace cannot say what changed since the table's last epoch (a
rebuild started it over, or it no longer keeps that history), the table takes
the difference between the view's rows and its own instead: its change feed
says what the rebuild changed, not every row deleted and inserted again.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.lake import Where
from dd_etl.plan.graph import unique_key
from dd_etl.runtime import Runtime
from dd_etl.sinks.delta_commit import feed_on
from dd_etl.sinks.delta_table import TRACE_META, VIEW_META, EpochCommit, SinkCommit, SinkTable
from dd_etl.sinks.spark_commit import SparkCommit
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF
from dd_etl.trace.placement import BULK, Placement


class MaterializedView:
    def __init__(self, runtime: Runtime, pipeline: str, view: str, where: Where) -> None:
        self.runtime = runtime
        self.view = view
        self.columns = runtime.flow.views[view].columns
        self.key = unique_key(runtime.flow.views[view])
        schema = runtime.flow.views[view].schema
        self.table = SinkTable(where, pipeline, view, "materialize", schema)

    def plan(
        self, epoch: int, changed: bool | None = None, placement: Placement = BULK
    ) -> EpochCommit | None:
        """The commit that brings the table to the view as of ``epoch``; ``changed=False``
        says the view did not change since the table's last epoch; the view is
        read as ``placement`` says, and a view read in the driver's is written
        there too (unless Spark has the table already). None if the table is
        there already."""
        log = self.table.log()
        last = None if log is None else log.epoch
        if last is not None and last >= epoch:
            return None
        trace = self.runtime.trace(self.runtime.flow.views[self.view])
        meta = {VIEW_META: self.view, TRACE_META: trace.generation}
        unchanged = changed is False and last == epoch - 1
        # The table follows the view's trace by its changes only from an epoch of
        # this very trace (not one a rebuild discarded) whose history it still keeps.
        follows = (
            log is not None
            and last is not None
            and log.last_meta().get(TRACE_META) == trace.generation
            and trace.state.since.less_equal_time((last,))
        )
        stored = None if log is None or self.table.where.is_local else log.stored_bytes()
        rewrite = placement.driver or self.runtime.thresholds.rewrites_whole(
            trace.state.records, stored
        )
        if rewrite and not (log is not None and log.spark_owned):
            if unchanged:
                return SinkCommit(self.table, epoch, None, replace=False, meta=meta)
            rows = self.runtime.read(self.view, as_of=epoch, placement=placement)
            changes = None  # a table without epochs yet: the rows added are the changes
            if log is not None and last is not None and feed_on(log.table):
                changes = (
                    self._net_changes(last + 1, epoch, placement)
                    if follows
                    else self._difference(rows)
                )
            return SinkCommit(self.table, epoch, rows, True, meta, changes)
        whole = None
        changes = None
        if not follows and not rewrite and last is not None:
            # A large table whose view's trace cannot say what changed since the
            # table's epoch (a rebuild started it over): it takes the difference.
            rows = self.runtime.read(self.view, as_of=epoch, placement=placement)
            changes = self._difference(rows)
        elif not follows or (rewrite and not unchanged):
            whole = self.runtime.read(self.view, as_of=epoch, placement=placement)
        elif not unchanged:
            assert last is not None
            changes = self._net_changes(last + 1, epoch, placement)
        return SparkCommit(
            self.runtime.spark,
            self.table,
            log,
            epoch,
            self.columns,
            self.key,
            whole,
            changes,
            lambda rows: self.runtime.read(self.view, epoch, placement, rows=rows),
            meta,
        )

    def _difference(self, rows: DataFrame) -> DataFrame:
        """``rows`` less the table's, as net changes: what putting them in place of
        the table's changes, when the view's trace cannot say (a rebuild started
        it over, or it no longer keeps the history since the table's epoch)."""
        held = self.runtime.spark.read.format("delta").load(self.table.where.spark)
        data = [F.col(quote(c)) for c in self.columns]
        signed = rows.select(*data, F.lit(1).alias(DIFF)).unionByName(
            held.select(*data, F.lit(-1).alias(DIFF))
        )
        net = signed.groupBy(*data).agg(F.sum(DIFF).alias(DIFF))
        return net.where(F.col(DIFF) != 0)

    def _net_changes(self, start: int, epoch: int, placement: Placement) -> DataFrame:
        """The view's changes at epochs ``[start, epoch]`` summed per row: its columns
        and a nonzero ``_diff``."""
        changes = self.runtime.changes(self.view, start, epoch + 1, placement)
        rows = [F.col(quote(c)) for c in self.columns]
        net = changes.groupBy(*rows).agg(F.sum(DIFF).alias(DIFF))
        return net.where(F.col(DIFF) != 0)
