"""Maintenance of every trace under a warehouse root: merge with bounded fuel, vacuum.

Shared by ``dd-etl trace maintain`` and the Dagster maintenance job, so both do
exactly the same work. Each step commits on its own and never blocks writers for
longer than one compare-and-set: a maintenance run racing an append loses at
worst one merge step, which it retries against the new state.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow.fs as pafs
from pyspark.sql import SparkSession

from dd_etl.lake import Location, Where, as_location
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


def find_traces(root: Where) -> Iterator[Location]:
    """The places under ``root`` holding a dd_etl trace (other Delta tables are
    skipped), found a directory level at a time: never listing a trace's files,
    which on an object store are most of what is there."""
    root = as_location(root)
    children = root.filesystem.get_file_info(pafs.FileSelector(root.fs_path, allow_not_found=True))
    names = sorted(c.base_name for c in children if c.type == pafs.FileType.Directory)
    if "_delta_log" in names:
        try:
            delta_log.load(root)
        except TraceNotFound:
            pass
        else:
            yield root
    for name in names:
        if name not in ("_delta_log", "data"):
            yield from find_traces(root / name)


def maintain(trace: DeltaTrace, fuel: int | None, retention_hours: float) -> MaintenanceReport:
    before = trace.reload()
    spent = trace.exert(fuel)
    removed = trace.vacuum(retention_hours)
    after = trace.state
    return MaintenanceReport(
        trace=after.name,
        path=trace.where.uri,
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
    root: Where,
    fuel: int | None,
    retention_hours: float,
    driver_merged: int = DRIVER_MERGED_RECORDS,
) -> list[MaintenanceReport]:
    """``maintain`` every trace under ``root``; merge steps of at most
    ``driver_merged`` records are made by the driver."""
    return [
        maintain(DeltaTrace(spark, p, driver_merged=driver_merged), fuel, retention_hours)
        for p in find_traces(root)
    ]
