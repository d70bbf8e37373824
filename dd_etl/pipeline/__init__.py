"""Config-driven pipelines: a YAML file of sources and views, kept current by ticks.

``open_pipeline(file)`` loads and checks the file and builds the dataflow;
``run_tick(pipeline)`` takes in one epoch of source changes and updates every
view and sink. The CLI and Dagster both call these.
"""

from dd_etl.errors import ConfigError, HistoryLost, PipelineError, SourceError
from dd_etl.pipeline.build import Pipeline, open_pipeline
from dd_etl.pipeline.config import PipelineConfig, load_config
from dd_etl.pipeline.tick import TickReport, run_tick

__all__ = [
    "ConfigError",
    "HistoryLost",
    "Pipeline",
    "PipelineConfig",
    "PipelineError",
    "SourceError",
    "TickReport",
    "load_config",
    "open_pipeline",
    "run_tick",
]
