"""The demo job: a taxi-trips change stream kept in a Delta-backed trace.

Each epoch writes a file of changes (new trips, corrected fares, deleted trips)
as a source would, appends those changes to a trace keyed by ``trip_id`` with
maintenance running, and at the end checks the trace against a from-scratch
accumulation of the change files at every epoch it still offers.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType
from rich.console import Console
from rich.table import Table

from dd_etl.lattice import Antichain
from dd_etl.trace.columns import DIFF, TIME
from dd_etl.trace.delta_trace import DeltaTrace

TRIPS = StructType(
    [
        StructField("trip_id", LongType(), False),
        StructField("passenger_count", LongType()),
        StructField("fare_amount", DoubleType()),
        StructField("trip_distance", DoubleType()),
    ]
)
RETAIN_EPOCHS = 2
READER = "demo"


@dataclass(frozen=True)
class DemoConfig:
    root: Path
    epochs: int = 6
    new_trips: int = 20_000
    corrections: int = 1_000
    deletions: int = 500


def new_trips(spark: SparkSession, epoch: int, n: int) -> DataFrame:
    ids = spark.range(epoch * n, (epoch + 1) * n).withColumnRenamed("id", "trip_id")
    h = F.abs(F.xxhash64("trip_id"))
    return ids.select(
        "trip_id",
        (h % 5 + 1).alias("passenger_count"),
        F.round((h % 9000) / 100 + 3, 2).alias("fare_amount"),
        F.round((h % 3000) / 100, 2).alias("trip_distance"),
    )


def epoch_changes(spark: SparkSession, trace: DeltaTrace, cfg: DemoConfig, epoch: int) -> DataFrame:
    """Inserts of new trips, plus fare corrections and deletions of existing ones."""
    inserts = new_trips(spark, epoch, cfg.new_trips).withColumn(DIFF, F.lit(1))
    if epoch == 0:
        return inserts.withColumn(TIME, F.lit(epoch).cast("long"))
    current = trace.read_at().drop(DIFF)
    pick = F.abs(F.xxhash64("trip_id", F.lit(epoch))) % 1000
    corrected = current.where(pick < cfg.corrections * 1000 // (cfg.new_trips * epoch))
    deleted = current.where(pick >= 1000 - cfg.deletions * 1000 // (cfg.new_trips * epoch))
    changes = (
        inserts.unionByName(corrected.withColumn(DIFF, F.lit(-1)))
        .unionByName(
            corrected.withColumn("fare_amount", F.col("fare_amount") + 1.5).withColumn(
                DIFF, F.lit(1)
            )
        )
        .unionByName(deleted.withColumn(DIFF, F.lit(-1)))
    )
    return changes.withColumn(TIME, F.lit(epoch).cast("long"))


def from_scratch(spark: SparkSession, changes_dir: Path, at: int) -> DataFrame:
    """The collection at epoch ``at``, accumulated directly from the change files."""
    changes = spark.read.parquet(str(changes_dir))
    data = TRIPS.fieldNames()
    return (
        changes.where(F.col(TIME) <= at)
        .groupBy(*data)
        .agg(F.sum(DIFF).alias(DIFF))
        .where(F.col(DIFF) != 0)
    )


def run_demo(spark: SparkSession, cfg: DemoConfig, console: Console) -> bool:
    shutil.rmtree(cfg.root, ignore_errors=True)
    changes_dir = cfg.root / "changes"
    trace = DeltaTrace.create(
        spark, str(cfg.root / "trips"), "trips", TRIPS, ["trip_id"], rows_per_file=20_000
    )
    reader = trace.open_reader(READER)
    for epoch in range(cfg.epochs):
        changes_file = changes_dir / f"epoch={epoch:05d}"
        epoch_changes(spark, trace, cfg, epoch).write.parquet(str(changes_file))
        changes = spark.read.parquet(str(changes_file)).withColumn(TIME, F.lit(epoch).cast("long"))
        trace.compare_and_append(
            changes, Antichain.from_epoch(epoch), Antichain.from_epoch(epoch + 1)
        )
        hold = Antichain.from_epoch(max(0, epoch + 1 - RETAIN_EPOCHS))
        reader.downgrade(hold, hold)
        trace.exert(4 * cfg.new_trips)
        console.print(
            f"epoch {epoch}: {changes.count():>6} changes appended; "
            f"spine {len(trace.state.batches)} batches, {trace.state.records} rows stored"
        )
    trace.vacuum(retention_hours=0)
    print_status(trace, console)
    return verify(spark, trace, changes_dir, console)


def print_status(trace: DeltaTrace, console: Console) -> None:
    s = trace.state
    console.print(
        f"\ntrace [bold]{s.name}[/]: upper {s.upper!r}, since {s.since!r}, key {list(s.key)}"
    )
    table = Table("batch", "lower", "upper", "since", "rows", "files", "level")
    for b in s.batches:
        d = b.description
        files = len(trace.files([b.id]))
        table.add_row(
            b.id[:8],
            repr(d.lower),
            repr(d.upper),
            repr(d.since),
            str(b.records),
            str(files),
            str(b.level),
        )
    console.print(table)
    passengers = (
        trace.read_at()
        .groupBy("passenger_count")
        .agg(F.sum(DIFF).alias("trips"), F.round(F.min("fare_amount"), 2).alias("min_fare"))
    )
    console.print("trips by passenger count, as of the latest epoch:")
    for row in passengers.orderBy("passenger_count").collect():
        console.print(
            f"  {row['passenger_count']}: {row['trips']} trips, min fare {row['min_fare']}"
        )


def verify(spark: SparkSession, trace: DeltaTrace, changes_dir: Path, console: Console) -> bool:
    since = trace.state.since.epoch_bound() or 0
    upper = trace.state.upper.epoch_bound() or 0
    ok = True
    for at in range(since, upper):
        ours = trace.read_at((at,))
        expected = from_scratch(spark, changes_dir, at)
        missing = expected.exceptAll(ours).count()
        extra = ours.exceptAll(expected).count()
        ok &= missing == extra == 0
        verdict = (
            "[green]ok[/]" if missing == extra == 0 else f"[red]{missing} missing, {extra} extra[/]"
        )
        console.print(f"verify as of epoch {at}: {verdict}")
    console.print("[bold green]verify passed[/]" if ok else "[bold red]verify FAILED[/]")
    return ok
