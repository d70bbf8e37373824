"""A Delta table as a source: changes from its change data feed, or by differencing
snapshots when the feed is not enabled.

The position is the table version the source's latest epoch covers. A feed that
can no longer be read back to that version (vacuumed files, cleaned-up log, a
table recreated at a lower version) is lost history: the run stops rather than
skip changes.

Spark's Delta reader reads the table (snapshots and change feeds alike), so
tables with deletion vectors or column mapping are sources, and an interval's
rows never pass through the driver. delta-rs answers what needs no Spark: the
table's version, schema and settings. A table that needs a reader feature
either reader lacks is refused, naming the feature. One shortcut: the change feed
of a small interval, on a table whose features delta-rs reads, is read by
delta-rs into the driver and handed to Spark as a local relation, with no file
listing or scan set-up; it reads at most as many rows as a small interval
takes in (``DRIVER_FEED_RECORDS``, or the pipeline's ``sizing.small_records``),
and a larger feed goes to Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata

import deltalake
import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.arrow_schema import arrow_schema
from dd_etl.errors import HistoryLost, SourceError, first_line
from dd_etl.failpoints import failpoint
from dd_etl.lake import Where, as_location
from dd_etl.local_relations import local_relation
from dd_etl.runtime.sizing import Thresholds
from dd_etl.sources.base import Capture, Position, conform, difference
from dd_etl.trace.delta_trace import DeltaTrace

CHANGE_TYPE = "_change_type"
GONE = "let_go"
"""A position's columns the source holds as NULL: the table has them no more as
they were (renamed, dropped, retyped), and no view reads them."""
INSERTS = ("insert", "update_postimage")
SIGN = "__sign"
DRIVER_FEED_RECORDS = Thresholds.small_records
"""The most change rows delta-rs reads into the driver before the feed goes to Spark,
unless the pipeline sets another (``sizing.small_records``)."""
DRIVER_FEED_FEATURES = frozenset({"deletionVectors", "timestampNtz", "v2Checkpoint"})
"""Reader features delta-rs's change feed reads (it refuses column mapping there)."""


class DeltaSource:
    def __init__(
        self,
        spark: SparkSession,
        pipeline: str,
        name: str,
        where: Where,
        mode: str,
        driver_feed: int = DRIVER_FEED_RECORDS,
        read: frozenset[str] | None = None,
    ) -> None:
        self.spark = spark
        self.driver_feed = driver_feed
        """A change feed of at most this many rows is read by the driver."""
        self.pipeline = pipeline
        self.name = name
        self.where = as_location(where)
        self.mode = mode
        self.read = read
        """The columns the pipeline's views read (None: all of them); any other may
        be renamed, dropped or change type in the table (``_let_go``)."""

    def reading(self, columns: frozenset[str]) -> DeltaSource:
        """This source, for a pipeline whose views read ``columns`` of it."""
        return DeltaSource(
            self.spark, self.pipeline, self.name, self.where, self.mode, self.driver_feed, columns
        )

    def _table(self, version: int | None = None) -> DeltaTable:
        try:
            return DeltaTable(
                self.where.uri, version=version, storage_options=self.where.delta_options
            )
        except TableNotFoundError:
            raise SourceError(self.name, f"no Delta table at {self.where.uri}") from None
        except Exception as e:
            if _unsupported(e):
                raise self._unreadable(e) from None
            if version is not None:
                raise HistoryLost(
                    self.pipeline, self.name, f"version {version} cannot be loaded ({e})"
                ) from None
            raise SourceError(
                self.name, f"cannot open the Delta table at {self.where.uri}: {e}"
            ) from e

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
        gone = self._let_go(table, schema)
        if position is None or sorted(gone) != position.get(GONE, []):
            # a column let go (or back) by a difference: the trace's rows of its old
            # values retracted, its rows as they are now inserted
            changes = difference(self._read(table, schema, gone), trace, schema)
            said = (
                f"snapshot of version {version}"
                if position is None
                else f"version {position['version']} → {version} (diff: {_said(gone)})"
            )
            return Capture(changes, _position(version, gone), said)
        read = int(position["version"])
        if version < read:
            raise HistoryLost(
                self.pipeline,
                self.name,
                f"the table is at version {version} but version {read} was already read "
                "(was it recreated or restored?)",
            )
        if version == read:
            return Capture(None, _position(version, gone), f"version {version}, unchanged")
        feed = table.metadata().configuration.get("delta.enableChangeDataFeed") == "true"
        if self.mode == "snapshot" or (self.mode == "auto" and not feed):
            changes = difference(self._read(table, schema, gone), trace, schema)
            return Capture(changes, _position(version, gone), f"version {read} → {version} (diff)")
        if not feed:
            raise SourceError(self.name, "mode `cdf` but the table's change data feed is off")
        return Capture(
            self._feed(table, read + 1, version, schema, gone),
            _position(version, gone),
            f"version {read} → {version}",
        )

    def snapshot(self, position: Position, schema: StructType) -> DataFrame | None:
        try:
            return self._read(self._table(int(position["version"])), schema, position.get(GONE, []))
        except HistoryLost:
            return None

    def lag(self, position: Position | None) -> str:
        try:
            version = self._table().version()
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

    def rewritten(self, position: Position) -> list[str]:
        """Nothing: a version of a table is never rewritten (a restore or an
        overwrite is a new version)."""
        return []

    def bad_value(self, position: Position, schema: StructType) -> str | None:
        """None: a table's values have its columns' types, which the trace's are."""
        return None

    # ---------------------------------------------------------------- reading

    def _let_go(self, table: DeltaTable, schema: StructType) -> list[str]:
        """The source's columns the table no longer has as they were (renamed,
        dropped, or of another type) and no view reads: the source holds them as
        NULL from then on. One a view reads (or one that cannot be NULL) is lost
        history, naming it."""
        current = from_arrow_schema(pa.schema(table.schema().to_arrow()))
        have = {f.name: f.dataType for f in current.fields}
        lost = [f for f in schema.fields if f.name not in have]
        changed = [f for f in schema.fields if f.name in have and have[f.name] != f.dataType]

        def read(f: StructField) -> bool:
            return not f.nullable or self.read is None or f.name in self.read

        renamed = [f.name for f in lost if read(f)]
        retyped = [
            f"{f.name} ({f.dataType.simpleString()} → {have[f.name].simpleString()})"
            for f in changed
            if read(f)
        ]
        if renamed or retyped:
            what = [f"columns {renamed} were renamed or dropped"] if renamed else []
            what += [f"columns changed type: {', '.join(retyped)}"] if retyped else []
            raise HistoryLost(self.pipeline, self.name, f"its schema changed: {'; '.join(what)}")
        return sorted(f.name for f in lost + changed)

    def _read(self, table: DeltaTable, schema: StructType, gone: Sequence[str]) -> DataFrame:
        """The snapshot's rows at ``table``'s version, read by Spark's Delta reader,
        the columns ``gone`` NULL."""
        reader = self.spark.read.format("delta").option("versionAsOf", table.version())
        try:
            rows = reader.load(self.where.spark)
        except Exception as e:
            if _unsupported(e):
                raise self._unreadable(e) from None
            raise
        return conform(_without(rows, gone), schema)

    def _feed(
        self, table: DeltaTable, start: int, end: int, schema: StructType, gone: Sequence[str]
    ) -> DataFrame:
        """The change feed of versions ``start..end`` as updates of ``schema``, the
        columns ``gone`` NULL."""
        features = set(table.protocol().reader_features or [])
        if features <= DRIVER_FEED_FEATURES:
            small = self._feed_in_driver(table, start, end, schema, gone)
            if small is not None:
                return small
        try:
            feed = (
                self.spark.read.format("delta")
                .option("readChangeFeed", "true")
                .option("startingVersion", start)
                .option("endingVersion", end)
                .load(self.where.spark)
            )
        except Exception as e:
            if _unsupported(e):
                raise self._unreadable(e) from None
            raise self._feed_lost(start, end, e) from None
        failpoint("source.feed_planned")
        sign = F.when(F.col(CHANGE_TYPE).isin(*INSERTS), 1).otherwise(-1)
        return conform(_without(feed, gone), schema, sign)

    def _feed_in_driver(
        self, table: DeltaTable, start: int, end: int, schema: StructType, gone: Sequence[str]
    ) -> DataFrame | None:
        """The feed read by delta-rs, unless it holds more than ``driver_feed`` rows."""
        try:
            batches = table.load_cdf(starting_version=start, ending_version=end)
            read: list[pa.RecordBatch] = []
            rows = 0
            for batch in batches:
                read.append(pa.record_batch(batch))
                rows += read[-1].num_rows
                if rows > self.driver_feed:
                    return None
        except Exception as e:
            raise self._feed_lost(start, end, e) from None
        names = schema.fieldNames()
        data_types = arrow_schema(schema)
        if rows == 0:
            return conform(local_relation(self.spark, data_types.empty_table(), schema), schema)
        feed = pa.Table.from_batches(read)
        for name in gone:
            if name in feed.column_names:
                feed = feed.drop_columns([name])
            feed = feed.append_column(name, pa.nulls(feed.num_rows, data_types.field(name).type))
        # delta-rs hands out string_view; Spark wants plain strings
        data = feed.select(names).cast(data_types)
        kinds = feed.column(CHANGE_TYPE).cast(pa.string()).to_pylist()
        signs = pa.array([1 if k in INSERTS else -1 for k in kinds], pa.int64())
        updates = data.append_column(SIGN, signs)
        signed = StructType([*schema.fields, StructField(SIGN, LongType(), False)])
        return conform(local_relation(self.spark, updates, signed), schema, F.col(SIGN))

    def _unreadable(self, e: Exception) -> SourceError:
        return SourceError(
            self.name,
            f"the Delta table at {self.where.uri} uses a feature dd_etl's Delta readers cannot "
            f"read ({first_line(e)}; delta-rs {deltalake.__version__}, delta-spark "
            f"{metadata.version('delta-spark')}); upgrade dd_etl, or drop the feature from the "
            "table (ALTER TABLE ... DROP FEATURE)",
        )

    def _feed_lost(self, start: int, end: int, e: Exception) -> HistoryLost:
        return HistoryLost(
            self.pipeline,
            self.name,
            f"its change data feed for versions {start}..{end} cannot be read ({first_line(e)})",
        )


def _without(rows: DataFrame, gone: Sequence[str]) -> DataFrame:
    """``rows`` with the columns ``gone`` NULL (``conform`` casts them)."""
    return rows.withColumns({name: F.lit(None) for name in gone}) if gone else rows


def _position(version: int, gone: Sequence[str]) -> Position:
    return {"version": version, GONE: sorted(gone)} if gone else {"version": version}


def _said(gone: Sequence[str]) -> str:
    if not gone:
        return "every column read again"
    return f"columns no view reads are NULL from now on: {', '.join(gone)}"


def _unsupported(e: Exception) -> bool:
    """Whether ``e`` is a Delta reader refusing a table feature it does not know
    (delta-rs's kernel, or Spark's ``DELTA_UNSUPPORTED_FEATURES_FOR_READ``)."""
    text = str(e)
    return "DELTA_UNSUPPORTED_FEATURES" in text or (
        "Unsupported" in text and "not supported" in text
    )
