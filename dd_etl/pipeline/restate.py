"""Restatement: a source's data was corrected in place (a partition's files
rewritten, a table restored), and the correction enters as a change at a new epoch.

The change is what the source holds now minus what the trace holds, both
limited to the rows the ``where`` predicate selects (the corrected partition):
earlier epochs keep the data as it was then, as every reader already saw it. The
restating tick is an ordinary tick with this change as the source's capture,
so it is idempotent and crash-safe like any other; an empty change is no tick.

Either way the source's position then records the data as read now: files
rewritten in place (``SourceReader.rewritten``, the test a run makes before it
refuses to go on) are recorded with their new stamps, by the tick or, when they
hold the rows taken in, on their own. So the next run goes on after a restatement.
"""

from __future__ import annotations

from functools import partial

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from dd_etl.errors import PipelineError
from dd_etl.pipeline.build import Pipeline
from dd_etl.pipeline.ingest import taken_in
from dd_etl.pipeline.lock import tick_lock
from dd_etl.pipeline.progress import Progress
from dd_etl.pipeline.tick import TickReport, _quiet, next_epoch, tick_holding_lock
from dd_etl.sources.base import Capture, Position, difference, encode_position, read_position


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
    with tick_lock(pipeline):  # what is held must not move between the diff and the tick
        epoch, resumed = next_epoch(pipeline)
        if resumed:
            raise PipelineError(
                f"epoch {epoch} of pipeline {pipeline.name!r} is unfinished: run a tick to "
                "complete it, then restate"
            )
        change, position, what = _correction(pipeline, source, where)
        if change is None:
            _record_rewritten(pipeline, source, position, progress)
            return None
        capture = Capture(change, position, what)
        return tick_holding_lock(pipeline, progress, None, None, None, {source: capture})


def _record_rewritten(
    pipeline: Pipeline, source: str, restated: Position, progress: Progress
) -> None:
    """Record ``restated`` as the source's position if files it covers were
    rewritten with the rows already taken in (a file written again, reformatted):
    no change, so no epoch, but a run must no longer find them rewritten."""
    trace = pipeline.runtime.trace(pipeline.flow.sources[source])
    position = read_position(trace)
    rewritten = [] if position is None else pipeline.readers[source].rewritten(position)
    if rewritten:
        trace.annotate(encode_position(restated))
        files = ", ".join(rewritten[:3]) + (", …" if len(rewritten) > 3 else "")
        progress(f"source:{source}", f"rewritten with the rows taken in, recorded as read: {files}")


def _correction(
    pipeline: Pipeline, source: str, where: str | None
) -> tuple[DataFrame | None, Position, str]:
    node = pipeline.flow.sources[source]
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
    rows_of = None if where is None else _predicate(current, where, source)
    # computed once: the files may change again before the tick commits it
    with taken_in(str(pipeline.file), source, partial(reader.bad_value, restated, node.schema)):
        change = difference(current, trace, node.schema, rows_of).localCheckpoint()
        rows = change.count()
    what = f"restatement of {where or 'all rows'}: {rows} changed row{'s' if rows != 1 else ''}"
    return (change if rows else None), restated, what


def _predicate(df: DataFrame, where: str, source: str) -> Column:
    """``where`` as a column, checked against the source's columns now, for a clear error."""
    try:
        predicate = F.expr(where)
        df.where(predicate).schema  # noqa: B018 - analyses the predicate
        return predicate
    except PySparkException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PipelineError(
            f"restating {source!r}: the predicate {where!r} is not valid: {first}"
        ) from None
