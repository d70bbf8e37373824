"""Rebuilding: recompute views from scratch, or take a source in again.

A view: its trace and its dependants' are discarded (``Runtime.rebuild``) and
the next tick recomputes them, e.g. after the view's definition changed.

A source whose history was lost (vacuumed, rewritten) is *resynced*: the
position is forgotten, so the next tick takes the source's current contents
minus what the trace holds as one epoch of changes; history before is kept. If
the source's columns changed, its trace cannot continue: it is discarded, the
source starts over (empty before the next epoch) and every view that reads it
is rebuilt.
"""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from dd_etl.errors import PipelineError
from dd_etl.pipeline.build import Pipeline, known_schema, make_reader, open_pipeline
from dd_etl.pipeline.config import load_config
from dd_etl.plan import nodes as n
from dd_etl.sources.base import POSITION_META
from dd_etl.trace.delta_trace import discard_table


def rebuild_views(pipeline: Pipeline, views: list[str], from_epoch: int | None = None) -> list[str]:
    """Discard ``views`` and their dependants; the next tick recomputes them. Their
    sinks continue (the next epoch's commit brings them up to date), unless the
    view's columns changed: then the sink table starts over. ``from_epoch``: the
    rebuilt views must be readable as of that epoch on; refused (nothing discarded)
    if the sources' history was already compacted past it."""
    if from_epoch is not None:
        for view in pipeline.runtime.dependants(views):
            first = pipeline.runtime.readable_from(view)
            if first > from_epoch:
                raise PipelineError(
                    f"view {view!r} cannot be rebuilt readable from epoch {from_epoch}: the "
                    f"sources it reads are compacted up to epoch {first} (their since), so "
                    f"history before it is gone; rebuild from epoch {first} or later, and "
                    "raise `compaction.retain_epochs` to keep more"
                )
    names = pipeline.runtime.rebuild(views)
    for name in names:
        for sink in (pipeline.materialized(name), pipeline.change_feed(name)):
            if sink is None or not DeltaTable.is_deltatable(sink.uri):
                continue
            columns = [f.name for f in DeltaTable(sink.uri).schema().fields]
            if sink.table.schema is not None and columns != sink.table.schema.fieldNames():
                discard_table(Path(sink.uri))
    return names


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
    warehouse = pipeline.warehouse
    held = known_schema(warehouse, source)
    reader = make_reader(pipeline.spark, loaded, source, loaded.config.sources[source])
    current = reader.schema()
    if held is None:
        return f"source {source} has not been taken in yet: nothing to rebuild"
    if held == current or all(f in current.fields for f in held.fields):
        trace = pipeline.runtime.trace(pipeline.flow.sources[source])
        trace.annotate({POSITION_META: ""})
        return (
            f"source {source} will be taken in again at the next run: its current "
            "contents, less what the pipeline holds, become one epoch of changes"
        )
    views = readers_of(pipeline, source)
    pipeline.runtime.discard(pipeline.flow.sources[source])
    fresh = open_pipeline(file, pipeline.spark)
    rebuilt = rebuild_views(fresh, views) if views else []
    return (
        f"source {source} changed its columns: it starts over at the next run "
        f"(empty before it); views rebuilt: {', '.join(rebuilt) or 'none'}"
    )
