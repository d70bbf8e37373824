"""``dd-etl``: the command line. Errors are rendered here, once, as one readable paragraph
(``--debug`` shows the trace); the exit status tells scripts what went wrong:

0 ok · 1 ``verify`` found a mismatch · 2 invalid pipeline file or arguments ·
3 a source's data or a trace cannot be read · 4 needs a ``rebuild`` (history
lost, definition changed) · 70 internal error.

Pipeline commands keep standard output for results: logs, progress and Spark's
chatter go to standard error, so ``dd-etl read … --format csv`` can be piped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from dd_etl.trace.errors import TraceError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Incremental ETL on Spark and Delta."
)
trace_app = typer.Typer(no_args_is_help=True, help="Inspect and maintain one trace.")
app.add_typer(trace_app, name="trace")
DEBUG = {"on": False}


@app.callback()
def main(
    debug: Annotated[
        bool,
        typer.Option("--debug", help="Show the stack trace of errors and Spark's own log lines."),
    ] = False,
) -> None:
    DEBUG["on"] = debug
    if debug:
        from dd_etl.spark import SPARK_LOGS_ENV

        os.environ[SPARK_LOGS_ENV] = "1"


T = TypeVar("T")

out = Console()
err = Console(stderr=True)


@app.command()
def demo(
    root: Annotated[Path, typer.Option(help="Where the demo writes its source and trace.")] = Path(
        "traces/demo"
    ),
    epochs: Annotated[int, typer.Option(min=1)] = 6,
) -> None:
    """Run the demo: a change stream of taxi trips kept in a Delta trace, then verified."""
    from dd_etl.demo import DemoConfig, run_demo
    from dd_etl.spark import session

    spark = session("dd_etl-demo")
    if not run_demo(spark, DemoConfig(root=root, epochs=epochs), out):
        raise typer.Exit(1)


@trace_app.command("status")
def trace_status(
    path: Path,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Frontiers, reader holds, merges and batches of a trace, read from its Delta log."""
    from dd_etl.trace import delta_log

    snapshot = _guard(lambda: delta_log.load(str(path)))
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


@trace_app.command("compact")
def trace_compact(
    path: Path,
    fuel: Annotated[
        int | None, typer.Option(help="Records of merge work to do (default: until settled).")
    ] = None,
) -> None:
    """Merge spine layers, advancing times to the trace's compaction frontier."""
    from dd_etl.spark import session
    from dd_etl.trace.delta_trace import DeltaTrace

    spark = session("dd_etl-compact")
    trace = _guard(lambda: DeltaTrace(spark, str(path)))
    before = len(trace.state.batches)
    spent = _guard(lambda: trace.exert(fuel))
    out.print(f"merged {spent} records of work: {before} → {len(trace.state.batches)} batches")


@trace_app.command("vacuum")
def trace_vacuum(
    path: Path,
    retention_hours: Annotated[float, typer.Option(min=0)] = 24.0,
) -> None:
    """Delete files no reader can reach any more (merged away, or never committed)."""
    from dd_etl.spark import session
    from dd_etl.trace.delta_trace import DeltaTrace

    spark = session("dd_etl-vacuum")
    trace = _guard(lambda: DeltaTrace(spark, str(path)))
    removed = _guard(lambda: trace.vacuum(retention_hours))
    out.print(f"removed {len(removed)} files")


@trace_app.command("maintain")
def trace_maintain(
    warehouse: Path,
    fuel: Annotated[int | None, typer.Option(help="Records of merge work per trace.")] = None,
    retention_hours: Annotated[float, typer.Option(min=0)] = 24.0,
) -> None:
    """Merge and vacuum every trace under a warehouse root (what the Dagster job runs)."""
    from dd_etl.spark import session
    from dd_etl.trace.maintenance import maintain_warehouse

    spark = session("dd_etl-maintain")
    reports = _guard(lambda: maintain_warehouse(spark, warehouse, fuel, retention_hours))
    table = Table("trace", "batches", "records", "files removed")
    for r in reports:
        table.add_row(
            r.path,
            f"{r.batches_before} → {r.batches_after}",
            f"{r.records_before} → {r.records_after}",
            str(r.files_removed),
        )
    out.print(table)


from dd_etl import cli_pipeline  # noqa: E402,F401  (registers the pipeline commands)


def _guard(action: Callable[[], T]) -> T:
    try:
        return action()
    except TraceError as e:
        err.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
