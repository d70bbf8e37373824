"""``dd-etl trace …``: inspect and maintain one trace (or every trace under a root),
without a pipeline file. Errors are raised, and rendered by the root command."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from dd_etl.cli.consoles import out
from dd_etl.cli.output import print_maintenance

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dd_etl.lake import Location

app = typer.Typer(no_args_is_help=True, help="Inspect and maintain one trace.")


@app.command("status")
def trace_status(
    path: str,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Frontiers, reader holds, merges and batches of a trace, read from its Delta log."""
    from dd_etl.trace import delta_log

    snapshot = delta_log.load(_location(path))
    s = snapshot.state
    batches: list[dict[str, Any]] = [
        {
            "id": b.id,
            "lower": b.description.lower.to_json(),
            "upper": b.description.upper.to_json(),
            "since": b.description.since.to_json(),
            "records": b.records,
            "files": len(snapshot.files.get(b.id, [])),
        }
        for b in s.batches
    ]
    if as_json:
        report = {
            "name": s.name,
            "delta_version": snapshot.version,
            "upper": s.upper.to_json(),
            "since": s.since.to_json(),
            "records": s.records,
            "holds": {r: h.to_json() for r, h in s.holds},
            "merges_in_progress": [{"id": m.id, "inputs": list(m.inputs)} for m in s.merges],
            "batches": batches,
        }
        print(json.dumps(report, indent=2))
        return
    out.print(f"trace [bold]{s.name}[/] (Delta version {snapshot.version})")
    out.print(f"  upper {s.upper!r}, since {s.since!r}, {s.records} records")
    for reader, hold in s.holds:
        out.print(f"  reader {reader}: logical {hold.logical!r}, physical {hold.physical!r}")
    table = Table("batch", "lower", "upper", "since", "records", "files")
    for b in s.batches:
        d = b.description
        files = str(len(snapshot.files.get(b.id, [])))
        table.add_row(b.id[:8], repr(d.lower), repr(d.upper), repr(d.since), str(b.records), files)
    out.print(table)


@app.command("compact")
def trace_compact(
    path: str,
    fuel: Annotated[
        int | None, typer.Option(help="Records of merge work to do (default: until settled).")
    ] = None,
) -> None:
    """Merge spine layers, advancing times to the trace's compaction frontier."""
    from dd_etl.trace.delta_trace import DeltaTrace

    where = _location(path)
    trace = DeltaTrace(_session("dd_etl-compact", where), where)
    before = len(trace.state.batches)
    spent = trace.exert(fuel)
    out.print(f"merged {spent} records of work: {before} → {len(trace.state.batches)} batches")


@app.command("vacuum")
def trace_vacuum(
    path: str,
    retention_hours: Annotated[float, typer.Option(min=0)] = 24.0,
) -> None:
    """Delete files no reader can reach any more (merged away, or never committed)."""
    from dd_etl.trace.delta_trace import DeltaTrace

    where = _location(path)
    trace = DeltaTrace(_session("dd_etl-vacuum", where), where)
    removed = trace.vacuum(retention_hours)
    out.print(f"removed {len(removed)} files")


@app.command("maintain")
def trace_maintain(
    warehouse: str,
    fuel: Annotated[int | None, typer.Option(help="Records of merge work per trace.")] = None,
    retention_hours: Annotated[float, typer.Option(min=0)] = 24.0,
) -> None:
    """Merge and vacuum every trace under a warehouse root (what the Dagster job runs)."""
    from dd_etl.trace.maintenance import maintain_warehouse

    where = _location(warehouse)
    reports = maintain_warehouse(_session("dd_etl-maintain", where), where, fuel, retention_hours)
    print_maintenance(reports, by_path=True)


def _location(text: str) -> Location:
    """A trace or warehouse named on the command line: a path, or a URI reached with
    the standard AWS environment variables."""
    from dd_etl.lake import Location, StoreOptions

    return Location.of(text, StoreOptions.from_environment())


def _session(name: str, where: Location) -> SparkSession:
    from dd_etl.spark import session

    spark = session(name, object_storage=not where.is_local)
    where.configure(spark)
    return spark
