"""Errors a user can act on: each says where the problem is and what to do.

They are raised where detected and rendered once, by the CLI (or Dagster), as one
readable paragraph; exit codes follow the kind of error. This module imports
nothing of dd_etl, so every layer (sources, pipelines, the CLI) can raise them.
"""

from __future__ import annotations

from pathlib import Path


class PipelineError(Exception):
    """Anything a user of a pipeline can act on; ``exit_code`` tells scripts the kind."""

    exit_code = 3


class ConfigError(PipelineError):
    """The pipeline file is invalid: names the file, the line, the key path and the reason."""

    exit_code = 2

    def __init__(self, file: Path | str, key: str, reason: str, line: int | None = None) -> None:
        self.file = str(file)
        self.key = key
        self.reason = reason
        self.line = line
        where = f"{self.file}:{line}" if line is not None else self.file
        super().__init__(f"{where}: {key}: {reason}" if key else f"{where}: {reason}")


class SourceError(PipelineError):
    """A source's data cannot be taken in (unreadable files, values of the wrong type)."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        super().__init__(f"source {source!r}: {reason}. Nothing was committed.")


class HistoryLost(PipelineError):
    """A source was rewritten so that the changes since the last run cannot be read."""

    exit_code = 4

    def __init__(self, pipeline: str, source: str, reason: str) -> None:
        self.source = source
        super().__init__(
            f"source {source!r} lost history the pipeline has not read yet: {reason}. "
            f"Nothing was committed. To take in the source's current contents as the "
            f"next epoch (the changes in between become one change), run "
            f"`dd-etl rebuild {pipeline} --source {source}`."
        )


class NeedsRebuild(PipelineError):
    """A view's definition changed since its results were computed."""

    exit_code = 4


class PlanError(ValueError):
    """A dataflow that cannot be built: names the operator and what is wrong."""
