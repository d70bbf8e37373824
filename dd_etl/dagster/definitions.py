"""Dagster definitions for trace maintenance over a warehouse root.

No ``from __future__ import annotations`` here: Dagster reads the op's config and
resource types from its annotations at definition time.
"""

from pathlib import Path

import dagster as dg

from dd_etl.dagster.resources import SparkResource
from dd_etl.trace.maintenance import maintain_warehouse


class MaintenanceConfig(dg.Config):
    fuel: int | None = None
    """Records of merge work per trace; unset merges until each spine is settled."""
    retention_hours: float = 24.0
    """Files unreachable for this long are deleted."""


def maintenance_definitions(
    warehouse: Path, cron_schedule: str = "17 * * * *", spark: SparkResource | None = None
) -> dg.Definitions:
    """A job that merges and vacuums every trace under ``warehouse``, on a schedule."""

    @dg.op(name="maintain_traces")
    def maintain_traces(
        context: dg.OpExecutionContext, config: MaintenanceConfig, spark: SparkResource
    ) -> dg.Output[int]:
        reports = maintain_warehouse(spark.spark, warehouse, config.fuel, config.retention_hours)
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

    @dg.job(name="trace_maintenance", tags={"dd_etl/kind": "maintenance"})
    def trace_maintenance() -> None:
        maintain_traces()

    schedule = dg.ScheduleDefinition(
        name="trace_maintenance_schedule", cron_schedule=cron_schedule, job=trace_maintenance
    )
    return dg.Definitions(
        jobs=[trace_maintenance],
        schedules=[schedule],
        resources={"spark": spark or SparkResource()},
    )
