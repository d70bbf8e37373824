"""The pipeline's errors, under the name they have always been imported by."""

from dd_etl.errors import ConfigError, HistoryLost, PipelineError, SourceError

__all__ = ["ConfigError", "HistoryLost", "PipelineError", "SourceError"]
