"""A Dagster Component, so a project declares pipelines in ``defs.yaml``::

    type: dd_etl.dagster.PipelineComponent
    attributes:
      pipelines: [../../taxi/pipeline.yaml]
      tick_schedule: "*/15 * * * *"

No ``from __future__ import annotations``: the attributes are resolved from the
model's annotations at load time.
"""

from pathlib import Path

import dagster as dg
from pydantic import Field

from dd_etl.dagster.definitions import SAMPLE_ABOVE, pipeline_definitions
from dd_etl.dagster.resources import SparkResource


class PipelineComponent(dg.Component, dg.Model, dg.Resolvable):
    """dd_etl pipelines as assets, with their ticks, backfills, audits and maintenance."""

    pipelines: list[str] = Field(description="Pipeline YAML files, relative to this defs.yaml")
    tick_schedule: str | None = Field(
        "*/15 * * * *", description="Cron of the ingest tick (skipped when nothing is new)"
    )
    sensor_interval_seconds: int | None = Field(
        30, description="How often the source sensor looks for new data; null: no sensor"
    )
    maintenance_schedule: str | None = Field("17 * * * *", description="Cron of maintenance")
    audit_schedule: str | None = Field("0 3 * * *", description="Cron of the equivalence audit")
    automation_running: bool = Field(
        False, description="Start the schedules and the sensor switched on"
    )
    max_lag_epochs: int = Field(0, description="Freshness check: epochs a view may be behind")
    audit_sample_above: int = Field(
        SAMPLE_ABOVE, description="Views larger than this are audited on a hash sample"
    )
    spark_master: str | None = Field(
        None, description="Send every pipeline here (default: each pipeline's own spark:)"
    )
    spark_remote: str | None = Field(
        None, description="Send every pipeline to this Spark Connect server (sc://host:port)"
    )
    spark_conf: dict[str, str] = Field(default_factory=dict)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        base = Path(context.path)
        return pipeline_definitions(
            [base / p for p in self.pipelines],
            tick_cron=self.tick_schedule,
            sensor_interval_seconds=self.sensor_interval_seconds,
            maintenance_cron=self.maintenance_schedule,
            audit_cron=self.audit_schedule,
            automation_running=self.automation_running,
            max_lag=self.max_lag_epochs,
            sample_above=self.audit_sample_above,
            spark=SparkResource(
                master=self.spark_master, remote=self.spark_remote, conf=self.spark_conf
            ),
        )
