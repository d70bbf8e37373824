"""Dagster definitions from pipeline files: assets, checks, jobs, schedules, sensors.

No ``from __future__ import annotations`` here: Dagster reads the op's config and
resource types from its annotations at definition time.
"""

from collections.abc import Iterator, Sequence
from pathlib import Path

import dagster as dg

from dd_etl.dagster.assets import pipeline_assets
from dd_etl.dagster.automation import TickJob, source_sensor, tick_schedule
from dd_etl.dagster.backfills import backfill_jobs
from dd_etl.dagster.checks import cheap_check_specs, equivalence_results, equivalence_specs
from dd_etl.dagster.dbt_nodes import test_check_specs
from dd_etl.dagster.names import KIND_TAG, PIPELINE_TAG, asset_key, asset_views, identifier
from dd_etl.dagster.resources import SparkResource
from dd_etl.dagster.runs import failures, open_for
from dd_etl.lake import Location, Where, as_location
from dd_etl.pipeline.config import LoadedConfig, load_config, warehouse_of

SAMPLE_ABOVE = 1_000_000
"""Views with more records than this are audited on a hash sample of that many."""


class MaintenanceConfig(dg.Config):
    fuel: int | None = None
    """Records of merge work per trace; unset merges until each spine is settled."""
    retention_hours: float = 24.0
    """Files unreachable for this long are deleted."""


def maintenance_job(warehouse: Where, name: str = "trace") -> dg.JobDefinition:
    """Merges spine layers (bounded by ``fuel``), advances each trace's ``since`` to
    the meet of its reader holds and vacuums dead files, for every trace under
    ``warehouse``. Not tagged with the pipeline: it never waits for ticks, nor
    they for it (merges and appends commit side by side)."""
    where = as_location(warehouse)

    @dg.op(name=f"{identifier(name)}_maintain_traces")
    def maintain_traces(
        context: dg.OpExecutionContext, config: MaintenanceConfig, spark: SparkResource
    ) -> dg.Output[int]:
        from dd_etl.trace.maintenance import maintain_warehouse

        session = spark.session(object_storage=not where.is_local)
        where.configure(session)
        reports = maintain_warehouse(session, where, config.fuel, config.retention_hours)
        for r in reports:
            context.log.info(
                f"{r.trace}: {r.batches_before} → {r.batches_after} batches, "
                f"{r.records_before} → {r.records_after} records, {r.files_removed} files removed"
            )
        return dg.Output(
            len(reports),
            metadata={
                "traces": dg.MetadataValue.json([r.to_json() for r in reports]),
                "batches_after": sum(r.batches_after for r in reports),
                "files_removed": sum(r.files_removed for r in reports),
            },
        )

    @dg.job(name=f"{identifier(name)}_maintenance", tags={KIND_TAG: "maintenance"})
    def maintenance() -> None:
        maintain_traces()

    return maintenance


def maintenance_definitions(
    warehouse: Where, cron_schedule: str = "17 * * * *", spark: SparkResource | None = None
) -> dg.Definitions:
    """Maintenance of every trace under ``warehouse``, on a schedule."""
    job = maintenance_job(warehouse)
    schedule = dg.ScheduleDefinition(
        name=f"{job.name}_schedule", cron_schedule=cron_schedule, job=job
    )
    return dg.Definitions(
        jobs=[job], schedules=[schedule], resources={"spark": spark or SparkResource()}
    )


def equivalence_check(loaded: LoadedConfig, sample_above: int) -> dg.AssetChecksDefinition:
    file, name = loaded.file, loaded.config.name
    views = {asset_key(loaded, v): v for v in asset_views(loaded)}

    @dg.multi_asset_check(
        name=f"{identifier(name)}_equivalence",
        specs=equivalence_specs(loaded),
        can_subset=True,
        op_tags={KIND_TAG: "audit"},
    )
    def audit(
        context: dg.AssetCheckExecutionContext, spark: SparkResource
    ) -> Iterator[dg.AssetCheckResult]:
        chosen = [views[k.asset_key] for k in context.selected_asset_check_keys]
        with failures():
            pipeline = open_for(file, spark)
            yield from equivalence_results(pipeline, chosen, sample_above)

    return audit


def pipeline_definitions(
    files: Sequence[str | Path],
    *,
    tick_cron: str | None = "*/15 * * * *",
    sensor_interval_seconds: int | None = 30,
    maintenance_cron: str | None = "17 * * * *",
    audit_cron: str | None = "0 3 * * *",
    automation_running: bool = False,
    max_lag: int = 0,
    sample_above: int = SAMPLE_ABOVE,
    spark: SparkResource | None = None,
) -> dg.Definitions:
    """Everything Dagster needs to run the pipelines in ``files``, built from the
    files alone (no Spark until a run). Per pipeline: its assets and checks, a tick
    job with its schedule and source sensor, the backfill jobs, an audit job for
    the equivalence checks and a maintenance job for its warehouse, each on a
    schedule (``None`` leaves one out; ``automation_running`` starts them on)."""
    assets: list[dg.AssetsDefinition] = []
    checks: list[dg.AssetChecksDefinition] = []
    jobs: list[TickJob] = []
    schedules: list[dg.ScheduleDefinition] = []
    sensors: list[dg.SensorDefinition] = []
    warehouses: dict[Location, str] = {}
    for file in files:
        loaded = load_config(file)
        name = loaded.config.name
        prefix = identifier(name)
        if any(a.node_def.name == f"{prefix}_assets" for a in assets):
            raise ValueError(f"{file}: another pipeline file is also named {name!r}")
        tables = pipeline_assets(loaded, max_lag)
        audit = equivalence_check(loaded, sample_above)
        assets.append(tables)
        checks.append(audit)
        cheap = [spec.key for spec in [*cheap_check_specs(loaded), *test_check_specs(loaded)]]
        tick = dg.define_asset_job(
            f"{prefix}_tick",
            selection=dg.AssetSelection.assets(tables).without_checks()
            | dg.AssetSelection.checks(*cheap),
            tags={PIPELINE_TAG: name},
            description=f"One ingest tick of {name}: every source and view, cheap checks",
        )
        audit_job = dg.define_asset_job(
            f"{prefix}_audit",
            selection=dg.AssetSelection.checks(audit),
            description=f"Every view of {name} against a from-scratch recomputation",
        )
        jobs += [tick, audit_job, *backfill_jobs(loaded.file, name)]
        if tick_cron is not None:
            schedules.append(tick_schedule(loaded, tick, tick_cron, automation_running))
        if sensor_interval_seconds is not None:
            sensors.append(source_sensor(loaded, tick, sensor_interval_seconds, automation_running))
        if audit_cron is not None:
            schedules.append(
                dg.ScheduleDefinition(
                    name=f"{prefix}_audit_schedule", cron_schedule=audit_cron, job=audit_job
                )
            )
        warehouses.setdefault(warehouse_of(loaded), name)
    for warehouse, name in warehouses.items():
        job = maintenance_job(warehouse, name)
        jobs.append(job)
        if maintenance_cron is not None:
            schedules.append(
                dg.ScheduleDefinition(
                    name=f"{job.name}_schedule", cron_schedule=maintenance_cron, job=job
                )
            )
    return dg.Definitions(
        assets=assets,
        asset_checks=checks,
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources={"spark": spark or SparkResource()},
        executor=dg.in_process_executor,
    )
