"""``materialize:``: a plain Delta table equal to a view's contents, kept current.

Bag semantics (a row with multiplicity 3 is stored three times), in the order
of the view's columns, readable by any Delta reader. Each epoch is one atomic
commit that replaces the table's files with the view as of that epoch (only
when the view changed; otherwise the commit only records the epoch), so Delta
time travel goes back epoch by epoch: the commit's ``dd_etl.epoch`` says which.
"""

from __future__ import annotations

from dd_etl.runtime import Runtime
from dd_etl.sinks.delta_table import SinkCommit, SinkTable
from dd_etl.trace.placement import BULK, Placement


class MaterializedView:
    def __init__(self, runtime: Runtime, pipeline: str, view: str, uri: str) -> None:
        self.runtime = runtime
        self.view = view
        self.uri = uri
        schema = runtime.flow.views[view].schema
        self.table = SinkTable(uri, f"dd_etl/{pipeline}/{view}/materialize", schema)

    def plan(
        self, epoch: int, changed: bool | None = None, placement: Placement = BULK
    ) -> SinkCommit | None:
        """The commit that brings the table to the view as of ``epoch``; ``changed=False``
        says the view did not change since the table's last epoch; the view is
        read as ``placement`` says. None if the table is there already."""
        last = self.table.epoch()
        if last is not None and last >= epoch:
            return None
        meta = {"dd_etl.view": self.view}
        if changed is False and last == epoch - 1:
            return SinkCommit(self.table, epoch, None, replace=False, meta=meta)
        rows = self.runtime.read(self.view, as_of=epoch, placement=placement)
        return SinkCommit(self.table, epoch, rows, replace=True, meta=meta)
