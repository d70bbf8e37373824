"""Dagster integration: a pipeline file becomes a code location with no Python.

``PipelineComponent`` is the Component type for ``defs.yaml``;
``pipeline_definitions`` builds the same ``Definitions`` from Python.

Dagster loads the code location in every run's process and in its daemon's
evaluations, and a run's step mostly goes to the dd_etl server: so building the
definitions reads the pipeline files only, and Spark, Arrow and the runtime are
imported inside the steps, sensors, schedules and ops that use them.
"""

from dd_etl.dagster.component import PipelineComponent
from dd_etl.dagster.definitions import maintenance_definitions, pipeline_definitions
from dd_etl.dagster.resources import SparkResource

__all__ = ["PipelineComponent", "SparkResource", "maintenance_definitions", "pipeline_definitions"]
