"""Maintenance of every trace under a warehouse root: merge with bounded fuel, vacuum.

Shared by ``dd-etl trace maintain`` and the Dagster maintenance job, so both do
exactly the same work. Each step commits on its own and never blocks writers for
longer than one compare-and-set: a maintenance run racing an append loses at
worst one merge step, which it retries against the new state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from dd_etl.trace import delta_log
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.driver_merge import DRIVER_MERGED_RECORDS
from dd_etl.trace.errors import TraceNotFound


@dataclass(frozen=True)
class MaintenanceReport:
    trace: str
    path: str
    batches_before: int
    batches_after: int
    records_before: int
    records_after: int
    fuel_spent: int
    files_removed: int
    upper: list[list[int]]
    since: list[list[int]]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def find_traces(root: Path) -> Iterator[Path]:
    """Directories under ``root`` holding a dd_etl trace (other Delta tables are skipped)."""
    for log in sorted(root.rglob("_delta_log")):
        try:
            delta_log.load(str(log.parent))
        except TraceNotFound:
            continue
        yield log.parent


def maintain(trace: DeltaTrace, fuel: int | None, retention_hours: float) -> MaintenanceReport:
    before = trace.reload()
    spent = trace.exert(fuel)
    removed = trace.vacuum(retention_hours)
    after = trace.state
    return MaintenanceReport(
        trace=after.name,
        path=trace.uri,
        batches_before=len(before.batches),
        batches_after=len(after.batches),
        records_before=before.records,
        records_after=after.records,
        fuel_spent=spent,
        files_removed=len(removed),
        upper=after.upper.to_json(),
        since=after.since.to_json(),
    )


def maintain_warehouse(
    spark: SparkSession,
    root: Path,
    fuel: int | None,
    retention_hours: float,
    driver_merged: int = DRIVER_MERGED_RECORDS,
) -> list[MaintenanceReport]:
    """``maintain`` every trace under ``root``; merge steps of at most
    ``driver_merged`` records are made by the driver."""
    return [
        maintain(DeltaTrace(spark, str(p), driver_merged=driver_merged), fuel, retention_hours)
        for p in find_traces(root)
    ]
