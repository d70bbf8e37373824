"""A directory of parquet, CSV or JSON files as a source.

``append`` mode: every file is data added once; a file that appears is the
epoch's new data, and a ``diff`` column (if the files have one) gives each
row's multiplicity, so -1 deletes a row. ``snapshot`` mode: the directory is
the whole table, and each epoch is the difference to what was taken in before.

The position is the set of files read, each with its size and modification
time as read (its stamp). A file whose stamp differs now was rewritten in place
after it was read (``rewritten_files``, the one test of it): a run stops there,
as history rewritten, and ``dd-etl restate`` takes the corrected file in and
records its new stamp. Files whose names start with ``_`` or ``.`` (Spark's
markers, temporary files) are ignored.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
from collections.abc import Mapping
from functools import partial, reduce
from pathlib import PurePath
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.errors import HistoryLost, SourceError, first_line
from dd_etl.lake import Location, Where, as_location
from dd_etl.lake.objects import StoredObject, listing
from dd_etl.local_relations import empty_frame
from dd_etl.sources.base import Capture, Position, conform, difference
from dd_etl.sources.csv_lines import record_line
from dd_etl.trace.delta_trace import DeltaTrace

EXTENSIONS = {
    "parquet": (".parquet",),
    "csv": (".csv", ".csv.gz", ".tsv"),
    "json": (".json", ".jsonl", ".ndjson", ".json.gz"),
}

Stamp = list[int | str]
"""A file as read: ``[size in bytes, version]``, the version its modification time
in ns on a local disk, its ETag on an object store (a list: positions are JSON)."""


def stamp_of(file: StoredObject) -> Stamp:
    version: int | str = file.version
    if isinstance(version, str) and version.isdigit():
        version = int(version)  # a local modification time, as positions held it before
    return [file.size, version]


def same_file(recorded: Any, now: Stamp) -> bool:
    """Whether a file is as it was when its stamp was ``recorded``: same size and
    modification time, so that a correction of the same length is seen too. A
    position of an earlier dd_etl recorded the size alone, and is held to that."""
    if isinstance(recorded, int):
        return recorded == now[0]
    return list(recorded) == now


def rewritten_files(read: Mapping[str, Any], listing: Mapping[str, Stamp]) -> list[str]:
    """The files of ``read`` (a position's, name → stamp) that are there now but
    not as they were read. The one decision of a file rewritten in place: a run
    refuses to go on past one, ``restate`` takes it in, a snapshot of the position
    cannot be read, and ``status`` tells."""
    return sorted(f for f, was in read.items() if f in listing and not same_file(was, listing[f]))


def unchanged(read: Mapping[str, Any], listing: Mapping[str, Stamp]) -> bool:
    """Whether ``listing`` holds exactly the files of ``read``, none rewritten."""
    return read.keys() == listing.keys() and not rewritten_files(read, listing)


class FileSource:
    def __init__(
        self,
        spark: SparkSession,
        pipeline: str,
        name: str,
        directory: Where,
        fmt: str,
        mode: str,
        declared: StructType | None,
        options: dict[str, str],
        diff_column: str,
        shown: str | None = None,
    ) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.name = name
        self.directory = as_location(directory)
        self.format = fmt
        self.mode = mode
        self.declared = declared
        self.options = {"header": "true", **options} if fmt == "csv" else dict(options)
        self.diff_column = diff_column
        self.shown = shown or self.directory.uri
        """The directory as the pipeline file names it: errors name files under it."""

    def listing(self) -> dict[str, Stamp]:
        """Data files under the directory (relative path → stamp), in name order."""
        if self.directory.is_local and not self.directory.path.is_dir():
            raise SourceError(self.name, f"{self.directory} is not a directory")
        found: dict[str, Stamp] = {}
        for file in sorted(listing(self.directory), key=lambda f: f.name):
            parts = file.name.split("/")
            if any(p.startswith(("_", ".")) for p in parts):
                continue
            if file.name.endswith(EXTENSIONS[self.format]):
                found[file.name] = stamp_of(file)
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
        read: dict[str, Any] = dict((position or {}).get("files", {}))
        if self.mode == "snapshot":
            if position is not None and unchanged(read, files):
                return Capture(None, {"files": files}, "unchanged")
            changes = difference(self._updates(list(files), schema), trace, schema)
            summary = f"snapshot of {len(files)} files"
            return Capture(changes, {"files": files}, summary, self._locator(files, schema))
        rewritten = rewritten_files(read, files)
        if rewritten:
            raise HistoryLost(
                self.pipeline,
                self.name,
                f"files {rewritten[:3]} were rewritten after they were read (their size, "
                "modification time or ETag changed); to take the corrected files in as a "
                f"change, run `dd-etl restate {self.pipeline} {self.name}`",
            )
        if position is None and trace.state.records:  # resync: everything, against the trace
            changes = difference(self._updates(list(files), schema), trace, schema)
            summary = f"resync of {len(files)} files"
            return Capture(changes, {"files": files}, summary, self._locator(files, schema))
        new = {f: files[f] for f in files if f not in read}
        new = dict(list(new.items())[:limit])
        if not new:
            return Capture(None, {"files": read}, "no new files")
        summary = f"{len(new)} new file{'s' if len(new) != 1 else ''}"
        updates = self._updates(list(new), schema)
        return Capture(updates, {"files": {**read, **new}}, summary, self._locator(new, schema))

    def snapshot(self, position: Position, schema: StructType) -> DataFrame | None:
        files = dict(position.get("files", {}))
        listing = self.listing()
        if any(f not in listing for f in files) or rewritten_files(files, listing):
            return None  # files were removed or rewritten since
        return self._updates(list(files), schema)

    def lag(self, position: Position | None) -> str:
        try:
            files = self.listing()
        except SourceError as e:
            return str(e)
        read = dict((position or {}).get("files", {}))
        if self.mode == "snapshot":
            return "up to date" if unchanged(read, files) else "changed since the last run"
        new = len([f for f in files if f not in read])
        said = [f"{new} new file{'s' if new != 1 else ''}"] if new else []
        rewritten = len(rewritten_files(read, files))
        if rewritten:
            said.append(f"{rewritten} rewritten since read (`dd-etl restate` takes them in)")
        return ", ".join(said) or "up to date"

    def signature(self) -> str:
        listing = json.dumps(self.listing(), sort_keys=True)
        return hashlib.sha256(listing.encode()).hexdigest()[:16]

    def caught_up(self, position: Position | None) -> bool:
        read = dict((position or {}).get("files", {}))
        files = self.listing()
        if self.mode == "snapshot":
            return position is not None and unchanged(read, files)
        return all(f in read for f in files)

    def restated(self, position: Position) -> Position:
        files = self.listing()
        read = dict(position.get("files", {}))
        gone = sorted(f for f in read if f not in files)
        if gone:
            raise SourceError(self.name, f"files {gone[:3]} were read before and are gone now")
        return {"files": {f: files[f] for f in read}}

    def rewritten(self, position: Position) -> list[str]:
        """``rewritten_files`` of the position: what a capture refuses."""
        return rewritten_files(dict(position.get("files", {})), self.listing())

    def bad_value(self, position: Position, schema: StructType) -> str | None:
        """Spark finds the value, its file and column; the driver counts the
        CSV file's lines to it (``csv_lines``), as Spark does not say its line."""
        files = list(position.get("files", {}))
        found = self._uncastable(files, schema) if files else None
        if found is None:
            return None
        file, column, index, value = found
        where = str(PurePath(self.shown) / file)
        line = None
        if self.format == "csv" and isinstance(value, str):
            line = record_line(self.directory / file, index, value, self.options)
        at = f"{where} line {line}" if line is not None else where
        return f"{at}, column {column}, value {value!r}"

    # ---------------------------------------------------------------- reading

    def _locator(self, files: Mapping[str, Stamp], schema: StructType) -> partial[str | None]:
        """``bad_value`` of ``files``: what a capture's failure looks for."""
        return partial(self.bad_value, {"files": dict(files)}, schema)

    def _uncastable(
        self, files: list[str], schema: StructType
    ) -> tuple[str, str, int, object] | None:
        """A value of ``files`` that Spark cannot cast to its column's type in
        ``schema`` (or the diff column's): its file (under the directory), column,
        the column's place in the file and the value as read. One Spark job, which
        stops at the first such value."""
        df = self._load(files, self.options)
        types = {f.name: f.dataType for f in schema.fields if f.name in df.columns}
        if self.diff_column in df.columns:
            types[self.diff_column] = LongType()
        if not types:
            return None
        names = list(types)
        bad = [
            F.col(f"`{c}`").isNotNull() & F.col(f"`{c}`").try_cast(types[c]).isNull() for c in names
        ]
        rows = (
            df.where(reduce(operator.or_, bad))
            .select(
                F.col("_metadata.file_path"),
                *(F.col(f"`{c}`").alias(f"value{i}") for i, c in enumerate(names)),
                *(b.alias(f"bad{i}") for i, b in enumerate(bad)),
            )
            .limit(1)
            .collect()
        )
        if not rows:
            return None
        row = rows[0]
        i = next(i for i in range(len(names)) if row[f"bad{i}"])
        file = self._under_directory(row["file_path"], files)
        return file, names[i], df.columns.index(names[i]), row[f"value{i}"]

    def _under_directory(self, uri: str, files: list[str]) -> str:
        """The file of ``files`` that Spark's ``uri`` names (as Spark's file metadata
        gives it: ``file:/…``, escaped)."""
        path = os.path.normpath(unquote(urlparse(uri).path))
        by_path = {os.path.normpath(urlparse((self.directory / f).spark).path): f for f in files}
        return by_path.get(path, path)

    def _load(self, files: list[str], options: dict[str, str]) -> DataFrame:
        paths = [(self.directory / f).spark for f in files]
        reader = self.spark.read.options(**options)
        try:
            if self.format == "parquet":
                first = self.directory / files[0]
                footer = footer_schema(first) if "mergeSchema" not in options else None
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


def footer_schema(file: Location) -> StructType | None:
    """The Spark schema of a parquet file, from its footer read in the driver, when
    every column is of a plain type: what Spark infers from it without the Spark
    job it runs to read one footer. None when Spark had better infer it."""
    try:
        with file.filesystem.open_input_file(file.fs_path) as stream:
            schema = pq.read_schema(stream)
    except (OSError, pa.ArrowException):
        return None  # Spark's read says what is wrong with the file
    if not all(any(plain(f.type) for plain in _PLAIN_TYPES) for f in schema):
        return None
    inferred = from_arrow_schema(schema)
    return StructType([StructField(f.name, f.dataType, True) for f in inferred.fields])
