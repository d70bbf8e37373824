"""Backfills as jobs with typed config (the launchpad shows the fields):

* ``<pipeline>_load_history``: a source's existing history taken in oldest first,
  ``per_epoch`` files or versions per epoch, each epoch a committed tick;
* ``<pipeline>_rebuild``: views recomputed from scratch (e.g. after a SQL change);
* ``<pipeline>_restate``: a corrected source partition taken in as a change at a
  new epoch.

Each run is idempotent: an epoch already committed is skipped, a restatement with
nothing to correct commits nothing. Impossible requests fail with a message.

No ``from __future__ import annotations``: Dagster reads each op's config and
resource types from its annotations (the types only a run needs are quoted).
"""

from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from pydantic import Field

from dd_etl.dagster.names import KIND_TAG, PIPELINE_TAG, asset_key, asset_views, identifier
from dd_etl.dagster.resources import SparkResource
from dd_etl.dagster.runs import failures, logged_progress, open_for

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline
    from dd_etl.pipeline.tick import TickReport


class LoadHistoryConfig(dg.Config):
    per_epoch: int = 1
    """New files (directory sources) or table versions (Delta sources) per epoch."""
    from_epoch: int | None = None
    """Where the load is meant to start: epochs are taken in order, so a later one
    than the pipeline's next epoch is refused; earlier ones already committed are
    skipped."""
    to_epoch: int | None = None
    """Stop after this epoch (default: when every source is caught up)."""


class RebuildConfig(dg.Config):
    views: list[str] = Field(description="Views to recompute; the views reading them follow")
    from_epoch: int | None = None
    """The rebuilt views must be readable as of this epoch on: refused if the sources'
    history before it was already compacted (their ``since`` is past it)."""


class RestateConfig(dg.Config):
    source: str
    where: str | None = None
    """SQL predicate selecting the corrected rows (the partition), e.g.
    ``pickup_date = '2026-01-03'``; default: the whole source."""


def _epoch_events(pipeline: "Pipeline", report: "TickReport") -> list[dg.AssetMaterialization]:
    """What an epoch of a backfill did, on the assets it touched."""
    assets = set(asset_views(pipeline.loaded))
    events = [
        dg.AssetMaterialization(
            asset_key(pipeline.loaded, s), metadata={"epoch": report.epoch, "taken in": taken}
        )
        for s, taken in report.sources.items()
    ]
    events += [
        dg.AssetMaterialization(
            asset_key(pipeline.loaded, v), metadata={"epoch": report.epoch, "rows out": written}
        )
        for v, written in report.views.items()
        if v in assets
    ]
    return events


def backfill_jobs(file: Path, name: str) -> list[dg.JobDefinition]:
    tags = {PIPELINE_TAG: name}
    prefix = identifier(name)

    @dg.op(name=f"{prefix}_load_history_op", tags={KIND_TAG: "backfill"})
    def load(
        context: dg.OpExecutionContext, config: LoadHistoryConfig, spark: SparkResource
    ) -> int:
        from dd_etl.pipeline.history import load_history

        with failures():
            pipeline = open_for(file, spark)
            progress, _ = logged_progress(context.log.info)

            def epoch_done(report: "TickReport") -> None:
                for event in _epoch_events(pipeline, report):
                    context.log_event(event)
                context.log.info(f"epoch {report.epoch} committed: {report.sources}")

            done = load_history(
                pipeline,
                config.per_epoch,
                config.from_epoch,
                config.to_epoch,
                progress,
                epoch_done,
            )
        context.add_output_metadata(
            {"epochs": len(done), "epoch range": _range(done), "sources caught up": True}
        )
        return len(done)

    @dg.op(name=f"{prefix}_rebuild_op", tags={KIND_TAG: "backfill"})
    def rebuild(
        context: dg.OpExecutionContext, config: RebuildConfig, spark: SparkResource
    ) -> list[str]:
        from dd_etl.pipeline.rebuild import rebuild_views
        from dd_etl.pipeline.tick import run_tick

        with failures():
            pipeline = open_for(file, spark)
            names = rebuild_views(pipeline, config.views, config.from_epoch)
            context.log.info(f"discarded {names}; recomputing them from the sources")
            progress, _ = logged_progress(context.log.info)
            report = run_tick(pipeline, progress, sources=[], views=names)
        for event in _epoch_events(pipeline, report):
            context.log_event(event)
        context.add_output_metadata({"rebuilt": names})
        return names

    @dg.op(name=f"{prefix}_restate_op", tags={KIND_TAG: "backfill"})
    def restatement(
        context: dg.OpExecutionContext, config: RestateConfig, spark: SparkResource
    ) -> int | None:
        from dd_etl.pipeline.restate import restate

        with failures():
            pipeline = open_for(file, spark)
            progress, _ = logged_progress(context.log.info)
            report = restate(pipeline, config.source, config.where, progress)
        if report is None:
            context.log.info("the source matches what was taken in: nothing to restate")
            context.add_output_metadata({"epoch": None, "restated": False})
            return None
        for event in _epoch_events(pipeline, report):
            context.log_event(event)
        context.add_output_metadata({"epoch": report.epoch, "restated": True})
        return report.epoch

    @dg.job(name=f"{prefix}_load_history", tags=tags, description="Load source history in epochs")
    def load_job() -> None:
        load()

    @dg.job(name=f"{prefix}_rebuild", tags=tags, description="Recompute views from scratch")
    def rebuild_job() -> None:
        rebuild()

    @dg.job(name=f"{prefix}_restate", tags=tags, description="Take in a corrected partition")
    def restate_job() -> None:
        restatement()

    return [load_job, rebuild_job, restate_job]


def _range(reports: list["TickReport"]) -> str:
    return f"{reports[0].epoch}..{reports[-1].epoch}" if reports else "none (already loaded)"
