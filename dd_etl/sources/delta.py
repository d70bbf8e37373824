"""A Delta table as a source: changes from its change data feed, or by differencing
snapshots when the feed is not enabled.

The position is the table version the source's latest epoch covers. A feed that
can no longer be read back to that version (vacuumed files, cleaned-up log, a
table recreated at a lower version) is lost history: the run stops rather than
skip changes. Reading the table itself is Spark's job (the parquet files of the
snapshot); only the change feed of an interval comes through delta-rs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.errors import HistoryLost, SourceError
from dd_etl.local_relations import empty_frame
from dd_etl.sources.base import Capture, Position, conform, difference
from dd_etl.trace.delta_trace import DeltaTrace

CHANGE_TYPE = "_change_type"
INSERTS = ("insert", "update_postimage")
UNSUPPORTED_FEATURES = ("deletionVectors", "columnMapping")
"""Reader features whose tables Spark cannot read as plain parquet files."""


class DeltaSource:
    def __init__(
        self,
        spark: SparkSession,
        pipeline: str,
        name: str,
        uri: str,
        mode: str,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.name = name
        self.uri = uri
        self.mode = mode
        self.storage_options = storage_options or None

    def _table(self, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        except TableNotFoundError:
            raise SourceError(self.name, f"no Delta table at {self.uri}") from None
        except Exception as e:
            if version is not None:
                raise HistoryLost(
                    self.pipeline, self.name, f"version {version} cannot be loaded ({e})"
                ) from None
            raise SourceError(self.name, f"cannot open the Delta table at {self.uri}: {e}") from e

    def schema(self) -> StructType:
        return from_arrow_schema(pa.schema(self._table().schema().to_arrow()))

    def capture(
        self,
        position: Position | None,
        trace: DeltaTrace,
        schema: StructType,
        limit: int | None = None,
    ) -> Capture:
        table = self._table()
        version = table.version()
        if limit is not None:  # the oldest versions not read yet, ``limit`` of them
            first = 0 if position is None else int(position["version"]) + 1
            if first + limit - 1 < version:
                version = first + limit - 1
                table = self._table(version)
        self._check_schema(table, schema)
        if position is None:
            changes = difference(self._read(table, schema), trace, schema)
            return Capture(changes, {"version": version}, f"snapshot of version {version}")
        read = int(position["version"])
        if version < read:
            raise HistoryLost(
                self.pipeline,
                self.name,
                f"the table is at version {version} but version {read} was already read "
                "(was it recreated or restored?)",
            )
        if version == read:
            return Capture(None, {"version": version}, f"version {version}, unchanged")
        feed = table.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
        if self.mode == "snapshot" or (self.mode == "auto" and not feed):
            changes = difference(self._read(table, schema), trace, schema)
            return Capture(changes, {"version": version}, f"version {read} → {version} (diff)")
        if not feed:
            raise SourceError(self.name, "mode `cdf` but the table's change data feed is off")
        return Capture(
            self._feed(table, read + 1, version, schema),
            {"version": version},
            f"version {read} → {version}",
        )

    def snapshot(self, position: Position, schema: StructType) -> DataFrame | None:
        try:
            return self._read(self._table(int(position["version"])), schema)
        except HistoryLost:
            return None

    def lag(self, position: Position | None) -> str:
        try:
            version = DeltaTable(self.uri, storage_options=self.storage_options).version()
        except Exception as e:
            return f"unreadable: {e}"
        if position is None:
            return f"version {version}, not read yet"
        behind = version - int(position["version"])
        return f"{behind} version{'s' if behind != 1 else ''} behind" if behind else "up to date"

    def signature(self) -> str:
        return str(self._table().version())

    def caught_up(self, position: Position | None) -> bool:
        return position is not None and int(position["version"]) >= int(self.signature())

    def restated(self, position: Position) -> Position:
        return dict(position)

    # ---------------------------------------------------------------- reading

    def _check_schema(self, table: DeltaTable, schema: StructType) -> None:
        current = from_arrow_schema(pa.schema(table.schema().to_arrow()))
        have = {f.name: f.dataType for f in current.fields}
        lost = [f.name for f in schema.fields if f.name not in have]
        changed = [
            f"{f.name} ({f.dataType.simpleString()} → {have[f.name].simpleString()})"
            for f in schema.fields
            if f.name in have and have[f.name] != f.dataType
        ]
        if lost or changed:
            what = (f"columns {lost} were dropped" if lost else "") + (
                f"{'; ' if lost else ''}columns changed type: {', '.join(changed)}"
                if changed
                else ""
            )
            raise HistoryLost(self.pipeline, self.name, f"its schema changed: {what}")
        features = set(table.protocol().reader_features or [])
        unsupported = sorted(features & set(UNSUPPORTED_FEATURES))
        if unsupported:
            raise SourceError(self.name, f"Delta reader features {unsupported} are not supported")

    def _read(self, table: DeltaTable, schema: StructType) -> DataFrame:
        """The snapshot's rows, read by Spark from the table's parquet files."""
        partition_columns = list(table.metadata().partition_columns)
        uris = table.file_uris()
        file_schema = StructType([f for f in schema.fields if f.name not in partition_columns])
        if not uris:
            return conform(empty_frame(self.spark, schema), schema)
        if not partition_columns:
            return conform(self.spark.read.schema(file_schema).parquet(*uris), schema)
        actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
        groups: dict[tuple[Any, ...], list[str]] = defaultdict(list)
        root = table.table_uri.rstrip("/")
        for i, path in enumerate(actions["path"]):
            values = tuple(actions[f"partition.{c}"][i] for c in partition_columns)
            groups[values].append(path if "://" in path else f"{root}/{path}")
        parts = []
        for values, files in groups.items():
            df = self.spark.read.schema(file_schema).parquet(*files)
            for c, v in zip(partition_columns, values, strict=True):
                df = df.withColumn(c, F.lit(v).cast(schema[c].dataType))
            parts.append(df)
        out = parts[0]
        for p in parts[1:]:
            out = out.unionByName(p)
        return conform(out, schema)

    def _feed(self, table: DeltaTable, start: int, end: int, schema: StructType) -> DataFrame:
        try:
            feed = pa.table(table.load_cdf(starting_version=start, ending_version=end))
        except Exception as e:
            raise HistoryLost(
                self.pipeline,
                self.name,
                f"its change data feed for versions {start}..{end} cannot be read ({e})",
            ) from None
        names = schema.fieldNames()
        target = arrow_schema(schema)
        # delta-rs hands out string_view; Spark wants plain strings
        data = feed.select(names).cast(target)
        kinds = feed.column(CHANGE_TYPE).cast(pa.string())
        signs = pa.array([1 if k in INSERTS else -1 for k in kinds.to_pylist()], pa.int64())
        updates = data.append_column("__sign", signs)
        if updates.num_rows == 0:
            return conform(empty_frame(self.spark, schema), schema)
        df = self.spark.createDataFrame(updates)
        return conform(df, schema, F.col("__sign"))
