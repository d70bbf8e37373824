"""Rows on standard output, as a table, CSV or JSON: only data goes there, so that
``dd-etl read … --format csv`` can be piped; counts and progress go to standard error."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

from dd_etl.cli.consoles import err, out

if TYPE_CHECKING:
    from dd_etl.trace.maintenance import MaintenanceReport


def orderable(datatype: Any) -> bool:
    """Whether Spark can sort by a column of this type (maps it cannot)."""
    from pyspark.sql.types import MapType

    return not isinstance(datatype, MapType)


def plain(value: Any) -> str:
    """A value as CSV text: ISO dates, plain (never scientific) numbers, NULL as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = repr(value)
        if "e" in text or "E" in text:
            text = format(decimal.Decimal(text), "f")
        return text
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list | dict):
        return json.dumps(value, default=plain)
    return str(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, decimal.Decimal | dt.datetime | dt.date | dt.time):
        return plain(value)
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return {k: _json_value(v) for k, v in value.asDict().items()}
    return value


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str, title: str) -> None:
    if fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        for r in rows:
            writer.writerow([plain(v) for v in r])
        return
    if fmt == "json":
        records = [{c: _json_value(v) for c, v in zip(columns, r, strict=True)} for r in rows]
        sys.stdout.write(json.dumps(records, indent=None) + "\n")
        return
    table = Table(*columns, title=title)
    for r in rows:
        table.add_row(*[plain(v) if v is not None else "NULL" for v in r])
    out.print(table)
    err.print(f"{len(rows)} rows", highlight=False)


def print_maintenance(reports: Sequence[MaintenanceReport], by_path: bool = False) -> None:
    """What maintenance did per trace, named by trace name or (``by_path``) location."""
    table = Table("trace", "batches", "records", "files removed")
    for r in reports:
        table.add_row(
            r.path if by_path else r.trace,
            f"{r.batches_before} → {r.batches_after}",
            f"{r.records_before} → {r.records_after}",
            str(r.files_removed),
        )
    out.print(table)
