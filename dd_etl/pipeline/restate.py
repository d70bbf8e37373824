"""Restatement: a source's data was corrected in place (a partition's files
rewritten, a table restored), and the correction enters as a change at a new epoch.

The change is what the source holds now minus what the trace holds, both
limited to the rows the ``where`` predicate selects (the corrected partition):
earlier epochs keep the data as it was then, as every reader already saw it. The
restating tick is an ordinary tick with this change as the source's capture,
so it is idempotent and crash-safe like any other; an empty change is no tick.
"""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dd_etl.pipeline.build import Pipeline
from dd_etl.pipeline.errors import PipelineError
from dd_etl.pipeline.tick import Progress, TickReport, _quiet, run_tick
from dd_etl.sources.base import Capture, read_position
from dd_etl.trace.columns import DIFF


def restate(
    pipeline: Pipeline, source: str, where: str | None = None, progress: Progress = _quiet
) -> TickReport | None:
    """Take in the correction of ``source`` (rows matching ``where``, a SQL predicate
    over its columns; default: all rows) at a new epoch. None if nothing differs."""
    node = pipeline.flow.sources.get(source)
    if node is None:
        raise PipelineError(
            f"unknown source {source!r}; sources are {sorted(pipeline.flow.sources)}"
        )
    trace = pipeline.runtime.trace(node)
    trace.reload()
    position = read_position(trace)
    if position is None:
        raise PipelineError(
            f"source {source!r} has taken nothing in yet: there is nothing to restate"
        )
    reader = pipeline.readers[source]
    restated = reader.restated(position)
    current = reader.snapshot(restated, node.schema)
    if current is None:
        raise PipelineError(f"source {source!r} can no longer be read as of {restated}")
    held = trace.read_at(None)
    if where is not None:
        current, held = _filtered(current, where, source), _filtered(held, where, source)
    names = node.columns
    both = current.select(*names, DIFF).unionByName(held.select(*names, (-F.col(DIFF)).alias(DIFF)))
    change = both.groupBy(*names).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0)
    change = change.localCheckpoint()  # read once: the source may change again meanwhile
    rows = change.count()
    if rows == 0:
        return None
    what = f"restatement of {where or 'all rows'}: {rows} changed row{'s' if rows != 1 else ''}"
    return run_tick(pipeline, progress, captures={source: Capture(change, restated, what)})


def _filtered(df: DataFrame, where: str, source: str) -> DataFrame:
    try:
        out = df.where(F.expr(where))
        out.schema  # noqa: B018 - analyses the predicate now, for a clear error
        return out
    except PySparkException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PipelineError(
            f"restating {source!r}: the predicate {where!r} is not valid: {first}"
        ) from None
