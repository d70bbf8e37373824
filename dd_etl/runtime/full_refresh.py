"""A view brought up to date by recomputing it, not by maintaining it.

The view's trace stays the same kind of history as under incremental
maintenance: for each pending epoch ``e`` the view is recomputed from the
sources as of ``e`` (views it reads are read from their traces, which the run
brought up to date first) and the difference from its contents at ``e - 1`` is
appended at time ``e``. Readers, sinks and ``changes`` cannot tell the two apart.

The operator state under the view (arrangements, reductions, loops that no other
view uses) is not maintained meanwhile, so it is discarded: a later incremental
run rebuilds it from the sources' consolidated history, instead of holding the
sources' compaction back for state nobody may need again.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.operators import linear
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import stateful, upstream
from dd_etl.runtime.catalog import readable_from
from dd_etl.runtime.recompute import recompute
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.placement import BULK, Placement

if TYPE_CHECKING:
    from dd_etl.plan.dataflow import Dataflow
    from dd_etl.runtime.catalog import TraceCatalog


def full_changes(
    traces: TraceCatalog, view: n.View, start: int, upper: int, placement: Placement = BULK
) -> DataFrame:
    """The view's changes at epochs ``[start, upper)``, by recomputing it at each,
    its traces read as ``placement`` says.

    Epochs before the sources' ``since`` cannot be told apart any more: the first
    recompute is at ``since`` and stands for all of them, as an incremental
    rebuild's would."""
    first = max(start, readable_from(traces, view))
    trace = traces.trace(view)
    before = trace.read_at((start - 1,), placement=placement) if start > 0 else _empty(traces, view)
    parts: list[DataFrame] = []
    for epoch in range(first, upper):
        now = recompute(traces, view.name, epoch, True, placement).localCheckpoint(eager=True)
        parts.append(_at(now, epoch))
        parts.append(_at(linear.negate(before), epoch))
        before = now
    if not parts:
        return traces.flow.empty_updates(view.schema)
    return linear.consolidate(functools.reduce(DataFrame.unionByName, parts))


def pending_records(traces: TraceCatalog, view: n.View) -> tuple[int, int]:
    """Source records at the epochs ``view`` has pending, and before them, as the
    trace logs count them (no Spark job). A merged batch straddling the view's
    upper counts as data: merges only reach back over settled epochs."""
    start = traces.trace(view).reload().upper
    change = data = 0
    for source in (x for x in upstream([view]) if isinstance(x, n.Source)):
        for batch in traces.trace(source).reload().batches:
            if start.less_equal(batch.description.lower):
                change += batch.records
            else:
                data += batch.records
    return change, data


def private_state(flow: Dataflow, view: n.View, recomputed: Collection[str]) -> list[n.Node]:
    """Operator state only ``view`` uses: upstream of it, not a source or a view,
    and not maintained for any view outside ``recomputed``."""
    others = [v for name, v in flow.views.items() if name not in recomputed]
    used = {x.id for x in stateful(others, recomputed)}
    return [
        x
        for x in upstream([view])
        if x.trace_name is not None and not isinstance(x, n.Source | n.View) and x.id not in used
    ]


def _at(df: DataFrame, epoch: int) -> DataFrame:
    data = [c for c in df.columns if c != DIFF]
    return df.select(*data, F.lit(epoch).cast("long").alias(TIME), DIFF)


def _empty(traces: TraceCatalog, view: n.View) -> DataFrame:
    return traces.flow.empty_updates(view.schema).drop(TIME)
