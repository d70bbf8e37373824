"""When ticks run: on a schedule, and when a sensor sees a source change (a Delta
table's new version, new files in a directory).

Both decide from Delta logs and directory listings only, so asking every few
seconds costs no Spark job, and both skip while a tick of the pipeline is queued
or running: ticks never overlap, and a tick that would find nothing new is never
started.
"""

import datetime
import json

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)
from dagster._utils.schedules import get_next_cron_tick

from dd_etl.dagster.names import PIPELINE_TAG, WARM_UNTIL_TAG, identifier
from dd_etl.errors import PipelineError
from dd_etl.pipeline.config import LoadedConfig, load_config

TickJob = dg.JobDefinition | UnresolvedAssetJobDefinition  # what define_asset_job returns

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _tick_running(instance: dg.DagsterInstance, pipeline: str) -> bool:
    runs = instance.get_run_records(
        dg.RunsFilter(tags={PIPELINE_TAG: pipeline}, statuses=IN_FLIGHT), limit=1
    )
    return bool(runs)


def next_tick_after(cron: str, tick: datetime.datetime | None) -> float:
    """When the schedule fires after ``tick`` (now if None), in seconds since the epoch."""
    after = tick or datetime.datetime.now(datetime.UTC)
    return get_next_cron_tick(cron, after + datetime.timedelta(seconds=1), None).timestamp()


def tick_schedule(
    loaded: LoadedConfig,
    job: TickJob,
    cron: str,
    running: bool,
) -> dg.ScheduleDefinition:
    file, name = loaded.file, loaded.config.name

    @dg.schedule(
        name=f"{identifier(name)}_tick_schedule",
        cron_schedule=cron,
        job=job,
        default_status=(
            dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED
        ),
        description=f"Ingest tick of {name}, skipped when no source has new data",
    )
    def schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        from dd_etl.pipeline.status import tick_due
        from dd_etl.server.client import keep_warm

        # The server that runs ticks stays warm until the next one is due, skipped or not.
        next_tick = next_tick_after(cron, context.scheduled_execution_time)
        if _tick_running(context.instance, name):
            keep_warm(next_tick)
            return dg.SkipReason("a tick of this pipeline is still running")
        try:
            due = tick_due(load_config(file))
        except PipelineError as e:
            return dg.SkipReason(str(e))
        if due is None:
            keep_warm(next_tick)
            return dg.SkipReason("no source has new data")
        return dg.RunRequest(tags={"dd_etl/reason": due, WARM_UNTIL_TAG: str(next_tick)})

    return schedule


def source_sensor(
    loaded: LoadedConfig,
    job: TickJob,
    interval: int,
    running: bool,
) -> dg.SensorDefinition:
    file, name = loaded.file, loaded.config.name

    @dg.sensor(
        name=f"{identifier(name)}_source_sensor",
        job=job,
        minimum_interval_seconds=interval,
        default_status=dg.DefaultSensorStatus.RUNNING
        if running
        else dg.DefaultSensorStatus.STOPPED,
        description=f"Starts a tick of {name} when one of its sources has new data",
    )
    def sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        from dd_etl.pipeline.status import source_signatures, tick_due

        current = load_config(file)
        seen = json.loads(context.cursor) if context.cursor else {}
        try:
            signatures = source_signatures(current)
        except PipelineError as e:  # a source not there yet, say: nothing to take in
            return dg.SkipReason(str(e))
        if signatures == seen:
            return dg.SkipReason("no source changed")
        if _tick_running(context.instance, name):
            return dg.SkipReason("a tick of this pipeline is still running")  # cursor kept
        due = tick_due(current)
        cursor = json.dumps(signatures, sort_keys=True)
        if due is None:  # changed, but already taken in (by a CLI run, say)
            return dg.SensorResult(skip_reason="sources already taken in", cursor=cursor)
        changed = sorted(s for s in signatures if signatures[s] != seen.get(s))
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(run_key=cursor, tags={"dd_etl/reason": f"{changed} changed"})
            ],
            cursor=cursor,
        )

    return sensor
