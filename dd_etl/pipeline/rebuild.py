"""Rebuilding: recompute views from scratch, or take a source in again.

A view: its trace and its dependants' are discarded (``Runtime.rebuild``) and
the next tick recomputes them; a tick does so itself for the views whose
definition changed.

A source whose history was lost (vacuumed, rewritten) is *resynced*: the
position is forgotten, so the next tick takes the source's current contents
minus what the trace holds as one epoch of changes; history before is kept. If
the source's columns changed, its trace cannot continue: it is discarded, the
source starts over (empty before the next epoch) as a new generation, and the
next run discards and recomputes everything computed from the old one.

Both hold the tick lock, as a tick does: what they discard is not in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

from dd_etl.errors import PipelineError
from dd_etl.pipeline.build import Pipeline, known_schema, make_reader, open_pipeline
from dd_etl.pipeline.config import load_config
from dd_etl.pipeline.lock import tick_lock
from dd_etl.plan import nodes as n
from dd_etl.sources.base import POSITION_META
from dd_etl.trace.delta_trace import discard_table


def rebuild_views(pipeline: Pipeline, views: list[str], from_epoch: int | None = None) -> list[str]:
    """Discard ``views`` and their dependants; the next tick recomputes them.
    ``from_epoch``: the rebuilt views must be readable as of that epoch on; refused
    (nothing discarded) if the sources' history was already compacted past it."""
    with tick_lock(pipeline):
        if from_epoch is not None:
            for view in pipeline.runtime.dependants(views):
                first = pipeline.runtime.readable_from(view)
                if first > from_epoch:
                    raise PipelineError(
                        f"view {view!r} cannot be rebuilt readable from epoch {from_epoch}: "
                        f"the sources it reads are compacted up to epoch {first} (their "
                        f"since), so history before it is gone; rebuild from epoch {first} "
                        "or later, and raise `compaction.retain_epochs` to keep more"
                    )
        return start_over(pipeline, views)


def start_over(pipeline: Pipeline, views: Sequence[str]) -> list[str]:
    """Discard ``views`` and their dependants, for the caller holding the tick lock;
    returns them all. Their sinks continue (the next epoch's commit brings them to
    the recomputed view), unless the view's columns changed: then the sink table
    starts over, before the traces, so a crash in between leaves the views to
    rebuild again."""
    names = pipeline.runtime.dependants(views)
    for name in names:
        for sink in (pipeline.materialized(name), pipeline.change_feed(name)):
            if sink is not None and sink.table.columns_differ():
                discard_table(sink.table.where)
    pipeline.runtime.rebuild(names)
    return names


class StrictRebuild(PipelineError):
    """A ``refresh: strict`` view would be rebuilt: only ``dd-etl rebuild`` may."""

    exit_code = 4  # needs a rebuild, as a source that lost history does


def refuse_strict(pipeline: Pipeline, changed: Sequence[str]) -> None:
    """Stop before anything is discarded when a view whose definition ``changed``
    would rebuild a ``refresh: strict`` view (itself, or one reading it)."""
    rt = pipeline.runtime
    for name in rt.dependants(changed):
        held = rt.trace(rt.view(name)).state.upper.epoch_bound() or 0
        if pipeline.flow.refresh_policy(name).policy != "strict" or held == 0:
            continue  # not strict, or holding no epoch's results (rebuilt already)
        why = (
            "its definition changed"
            if name in changed
            else f"{', '.join(v for v in changed if name in rt.dependants([v]))} "
            "changed, which it reads"
        )
        raise StrictRebuild(
            f"view {name!r} is `refresh: strict` and {why}: it is rebuilt only when asked, "
            f"with `dd-etl rebuild {pipeline.file} {name}` (which rebuilds the views "
            "reading it too)"
        )


def readers_of(pipeline: Pipeline, source: str) -> list[str]:
    def reads(node: n.Node) -> bool:
        if isinstance(node, n.Source):
            return node.name == source
        return any(reads(i) for i in node.inputs)

    return [name for name, v in pipeline.flow.views.items() if reads(v)]


def rebuild_source(file: str | Path, source: str, spark: SparkSession | None = None) -> str:
    """Resync ``source`` (or start it over if its columns changed); says what it did."""
    loaded = load_config(file)
    if source not in loaded.config.sources:
        raise PipelineError(
            f"unknown source {source!r}; sources are {sorted(loaded.config.sources)}"
        )
    pipeline = open_pipeline(file, spark)
    with tick_lock(pipeline):
        held = known_schema(pipeline.warehouse, source)
        reader = make_reader(
            pipeline.spark,
            loaded,
            source,
            loaded.config.sources[source],
            pipeline.runtime.thresholds.small_records,
        )
        current = reader.schema()
        if held is None:
            return f"source {source} has not been taken in yet: nothing to rebuild"
        node = pipeline.flow.sources[source]
        if held == current or all(f in current.fields for f in held.fields):
            pipeline.runtime.trace(node).annotate({POSITION_META: ""})
            return (
                f"source {source} will be taken in again at the next run: its current "
                "contents, less what the pipeline holds, become one epoch of changes"
            )
        # What was computed from the old history knows it by its generation: the
        # next run discards and recomputes it (``Runtime.discard_stale``).
        pipeline.runtime.discard(node)
    views = readers_of(pipeline, source)
    return (
        f"source {source} changed its columns: it starts over at the next run (empty "
        f"before it), which recomputes the views that read it: {', '.join(views) or 'none'}"
    )
