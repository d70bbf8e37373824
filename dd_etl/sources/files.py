"""A directory of parquet, CSV or JSON files as a source.

``append`` mode: every file is data added once; a file that appears is the
epoch's new data, and a ``diff`` column (if the files have one) gives each
row's multiplicity, so -1 deletes a row. ``snapshot`` mode: the directory is
the whole table, and each epoch is the difference to what was taken in before.

The position is the set of files read, with their sizes: a file that changed
after it was read is history rewritten, and stops the run. Files whose names
start with ``_`` or ``.`` (Spark's markers, temporary files) are ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType

from dd_etl.errors import HistoryLost, SourceError, first_line
from dd_etl.local_relations import empty_frame
from dd_etl.sources.base import Capture, Position, conform, difference
from dd_etl.trace.delta_trace import DeltaTrace

EXTENSIONS = {
    "parquet": (".parquet",),
    "csv": (".csv", ".csv.gz", ".tsv"),
    "json": (".json", ".jsonl", ".ndjson", ".json.gz"),
}


class FileSource:
    def __init__(
        self,
        spark: SparkSession,
        pipeline: str,
        name: str,
        directory: str,
        fmt: str,
        mode: str,
        declared: StructType | None,
        options: dict[str, str],
        diff_column: str,
    ) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.name = name
        self.directory = Path(directory)
        self.format = fmt
        self.mode = mode
        self.declared = declared
        self.options = {"header": "true", **options} if fmt == "csv" else dict(options)
        self.diff_column = diff_column

    def listing(self) -> dict[str, int]:
        """Data files under the directory (relative path → size), in name order."""
        if not self.directory.is_dir():
            raise SourceError(self.name, f"{self.directory} is not a directory")
        found: dict[str, int] = {}
        for root, dirs, files in os.walk(self.directory):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
            for f in sorted(files):
                if f.startswith(("_", ".")) or not f.endswith(EXTENSIONS[self.format]):
                    continue
                full = Path(root) / f
                found[str(full.relative_to(self.directory))] = full.stat().st_size
        return found

    def schema(self) -> StructType:
        if self.declared is not None:
            return self.declared
        files = self.listing()
        if not files:
            raise SourceError(
                self.name,
                f"{self.directory} has no {self.format} files yet, so its columns are "
                "unknown: add a file or declare `schema:` in the pipeline",
            )
        options = {**self.options, "inferSchema": "true"} if self.format == "csv" else {}
        df = self._load(list(files), options)
        return StructType([f for f in df.schema.fields if f.name != self.diff_column])

    def capture(
        self,
        position: Position | None,
        trace: DeltaTrace,
        schema: StructType,
        limit: int | None = None,
    ) -> Capture:
        files = self.listing()
        read: dict[str, int] = dict((position or {}).get("files", {}))
        if self.mode == "snapshot":
            if position is not None and files == read:
                return Capture(None, {"files": files}, "unchanged")
            changes = difference(self._updates(list(files), schema), trace, schema)
            return Capture(changes, {"files": files}, f"snapshot of {len(files)} files")
        rewritten = sorted(f for f, size in read.items() if f in files and files[f] != size)
        if rewritten:
            raise HistoryLost(
                self.pipeline, self.name, f"files {rewritten[:3]} changed after they were read"
            )
        if position is None and trace.state.records:  # resync: everything, against the trace
            changes = difference(self._updates(list(files), schema), trace, schema)
            return Capture(changes, {"files": files}, f"resync of {len(files)} files")
        new = [f for f in files if f not in read][:limit]
        if not new:
            return Capture(None, {"files": read}, "no new files")
        covered = {**read, **{f: files[f] for f in new}}
        summary = f"{len(new)} new file{'s' if len(new) != 1 else ''}"
        return Capture(self._updates(new, schema), {"files": covered}, summary)

    def snapshot(self, position: Position, schema: StructType) -> DataFrame | None:
        files = dict(position.get("files", {}))
        listing = self.listing()
        if any(listing.get(f) != size for f, size in files.items()):
            return None  # files were removed or rewritten since
        return self._updates(list(files), schema)

    def lag(self, position: Position | None) -> str:
        try:
            files = self.listing()
        except SourceError as e:
            return str(e)
        read = dict((position or {}).get("files", {}))
        if self.mode == "snapshot":
            return "up to date" if files == read else "changed since the last run"
        new = len([f for f in files if f not in read])
        return f"{new} new file{'s' if new != 1 else ''}" if new else "up to date"

    def signature(self) -> str:
        listing = json.dumps(self.listing(), sort_keys=True)
        return hashlib.sha256(listing.encode()).hexdigest()[:16]

    def caught_up(self, position: Position | None) -> bool:
        read = dict((position or {}).get("files", {}))
        files = self.listing()
        if self.mode == "snapshot":
            return position is not None and files == read
        return all(f in read for f in files)

    def restated(self, position: Position) -> Position:
        files = self.listing()
        read = dict(position.get("files", {}))
        gone = sorted(f for f in read if f not in files)
        if gone:
            raise SourceError(self.name, f"files {gone[:3]} were read before and are gone now")
        return {"files": {f: files[f] for f in read}}

    # ---------------------------------------------------------------- reading

    def _load(self, files: list[str], options: dict[str, str]) -> DataFrame:
        paths = [str(self.directory / f) for f in files]
        reader = self.spark.read.options(**options)
        try:
            if self.format == "parquet":
                footer = footer_schema(paths[0]) if "mergeSchema" not in options else None
                return (reader if footer is None else reader.schema(footer)).parquet(*paths)
            if self.format == "csv":
                return reader.csv(paths)
            return reader.json(paths)
        except PySparkException as e:
            raise SourceError(self.name, f"cannot read {files[:3]}: {first_line(e)}") from None

    def _updates(self, files: list[str], schema: StructType) -> DataFrame:
        """The files' rows as updates of ``schema``: columns matched by name and cast
        (values that do not fit fail the run), ``diff`` column as multiplicity."""
        if not files:
            return conform(empty_frame(self.spark, schema), schema)
        # CSV is read as text and cast, so a bad value fails instead of becoming NULL
        df = self._load(files, self.options)
        missing = [f.name for f in schema.fields if f.name not in df.columns]
        if missing:
            raise SourceError(self.name, f"columns {missing} are missing in {files[:3]}")
        diff = None
        if self.diff_column in df.columns:
            diff = F.coalesce(F.col(f"`{self.diff_column}`").cast("long"), F.lit(1))
        return conform(df, schema, diff)


_PLAIN_TYPES = (
    pa.types.is_signed_integer,
    pa.types.is_float32,
    pa.types.is_float64,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_date32,
    pa.types.is_decimal128,  # Spark's decimals go to 38 digits
)
"""Parquet columns whose Spark type is plain from their Arrow type (timestamps,
unsigned and nested types are Spark's to infer: INT96, nanoseconds, UTC or not)."""


def footer_schema(path: str) -> StructType | None:
    """The Spark schema of a parquet file, from its footer read in the driver, when
    every column is of a plain type: what Spark infers from it without the Spark
    job it runs to read one footer. None when Spark had better infer it."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException):
        return None  # Spark's read says what is wrong with the file
    if not all(any(plain(f.type) for plain in _PLAIN_TYPES) for f in schema):
        return None
    inferred = from_arrow_schema(schema)
    return StructType([StructField(f.name, f.dataType, True) for f in inferred.fields])
