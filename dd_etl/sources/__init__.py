"""Sources of a pipeline: Delta tables (change feed or snapshot differencing) and
directories of parquet/CSV/JSON files (appended, with a ``diff`` column, or snapshots)."""

from dd_etl.sources.base import Capture, Position, SourceReader
from dd_etl.sources.delta import DeltaSource
from dd_etl.sources.files import FileSource

__all__ = ["Capture", "DeltaSource", "FileSource", "Position", "SourceReader"]
