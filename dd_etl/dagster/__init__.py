"""Dagster integration: a pipeline file becomes a code location with no Python.

``PipelineComponent`` is the Component type for ``defs.yaml``;
``pipeline_definitions`` builds the same ``Definitions`` from Python.
"""

from dd_etl.dagster.component import PipelineComponent
from dd_etl.dagster.definitions import maintenance_definitions, pipeline_definitions
from dd_etl.dagster.resources import SparkResource

__all__ = ["PipelineComponent", "SparkResource", "maintenance_definitions", "pipeline_definitions"]
