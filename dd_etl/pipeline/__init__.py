"""Config-driven pipelines: a YAML file of sources and views, kept current by ticks.

``open_pipeline(file)`` loads and checks the file and builds the dataflow;
``run_tick(pipeline)`` takes in one epoch of source changes and updates every
view and sink. The CLI and Dagster both call these.

What needs Spark (``Pipeline``, ``open_pipeline``, ``TickReport``, ``run_tick``) is
imported on first use, so ``config`` and ``analysis``, which read the file only,
import no Spark.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from dd_etl.errors import ConfigError, HistoryLost, PipelineError, SourceError
from dd_etl.pipeline.config import PipelineConfig, load_config

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline, open_pipeline
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

_ON_FIRST_USE = {
    "Pipeline": "dd_etl.pipeline.build",
    "open_pipeline": "dd_etl.pipeline.build",
    "TickReport": "dd_etl.pipeline.tick",
    "run_tick": "dd_etl.pipeline.tick",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)
