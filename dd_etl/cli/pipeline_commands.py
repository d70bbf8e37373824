"""The pipeline commands of ``dd-etl``: run, status, read, changes, verify, compact,
rebuild, explain, restate, ui. Thin: each loads the pipeline and calls
``dd_etl.pipeline``; errors are raised, and rendered by the root command."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from dd_etl.cli.consoles import err, out
from dd_etl.cli.output import orderable, print_maintenance, print_rows
from dd_etl.cli.render import fail

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline
    from dd_etl.pipeline.config import LoadedConfig
    from dd_etl.pipeline.progress import Progress as TickProgress

app = typer.Typer()
PipelineFile = Annotated[Path, typer.Argument(help="The pipeline YAML file.")]


def _open(file: Path) -> Pipeline:
    from dd_etl.pipeline import open_pipeline

    return open_pipeline(file)


@contextmanager
def _steps() -> Iterator[TickProgress]:
    """A progress bar per step of a tick (sources, run, each view, sinks), on
    standard error."""
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        tasks: dict[str, Any] = {}

        def report(step: str, detail: str, done: float = 1.0) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=1)
            described = f"{step}: {detail}" if detail else step
            progress.update(tasks[step], completed=done, description=described)

        yield report


@app.command()
def run(
    pipeline: PipelineFile,
    epochs: Annotated[int, typer.Option(min=1, help="Ticks to run, one after another.")] = 1,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile",
            help="Print each tick's Spark jobs, tasks, task time, bytes and seconds per "
            "layer, trace and phase, and each trace's part of its layer's shared jobs.",
        ),
    ] = False,
) -> None:
    """One ingest tick: take in every source's changes as a new epoch and bring every
    view and sink up to date. A re-run after a crash completes the interrupted epoch."""
    from dd_etl.pipeline import run_tick

    p = _open(pipeline)
    for _ in range(epochs):
        with _steps() as progress:
            report = run_tick(p, progress, operators=profile)
        for view, why in report.rebuilt.items():
            err.print(f"rebuilt {view}: {why}", highlight=False)
        verb = "completed interrupted" if report.resumed else "ran"
        changed = sum(report.views.values())
        err.print(
            f"{verb} epoch {report.epoch} in {report.seconds:.1f}s: {changed} view change records",
            highlight=False,
        )
        _print_tests(p.loaded)
        if profile and report.profile is not None:
            text = "\n".join(report.profile.lines())
            out.print(text, highlight=False, markup=False, soft_wrap=True)


def _print_tests(loaded: LoadedConfig) -> None:
    """A dbt project's tests as the epoch leaves them: the count of each status, and
    the tests that did not pass."""
    if loaded.dbt is None or not loaded.dbt.tests:
        return
    from dd_etl.dbt.tests import outcomes, summary_line
    from dd_etl.pipeline.config import warehouse_of

    found = outcomes(loaded.dbt.tests, warehouse_of(loaded))
    err.print(summary_line(found), highlight=False)
    for outcome in found:
        if outcome.status != "pass":
            err.print(f"  {outcome.describe()}", highlight=False, markup=False)


@app.command()
def status(
    pipeline: PipelineFile,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Per source and view: frontiers, batches and records of its trace, lag, last tick."""
    from dd_etl.pipeline.config import load_config, warehouse_of
    from dd_etl.pipeline.status import pipeline_status

    loaded = load_config(pipeline)
    st = pipeline_status(loaded)
    if as_json:
        print(json.dumps(st.to_json(), indent=2, default=str))
        return
    out.print(f"pipeline [bold]{st.pipeline}[/] (warehouse {st.warehouse})", highlight=False)
    out.print(f"spark driver memory {st.driver_memory}", highlight=False)
    tick = st.last_tick
    if tick is None:
        out.print("last tick: never")
    else:
        when = dt.datetime.fromtimestamp(tick["finished_at"], dt.UTC).isoformat(timespec="seconds")
        took = tick["finished_at"] - tick["started_at"]
        out.print(f"last tick: epoch {tick['epoch']}, finished {when} in {took:.1f}s")
    table = Table("source", "upper", "since", "batches", "records", "covers", "lag")
    for s in st.sources:
        table.add_row(
            s.name, _n(s.upper), _n(s.since), str(s.batches), str(s.records),
            json.dumps(s.position) if s.position is not None else "", s.lag,
        )  # fmt: skip
    out.print(table)
    table = Table("view", "upper", "since", "batches", "records", "lag", "sinks (epoch)")
    for v in st.views:
        sinks = ", ".join(f"{k} {_n(e)}" for k, e in v.sinks.items())
        table.add_row(
            v.name, _n(v.upper), _n(v.since), str(v.batches), str(v.records), v.lag, sinks
        )
    out.print(table)
    out.print(f"internal traces: {st.internal_traces} ({st.internal_records} records)")
    if loaded.dbt is not None and loaded.dbt.tests:
        from dd_etl.dbt.tests import outcomes

        table = Table("dbt test", "on", "status", "failing rows", "severity")
        for o in outcomes(loaded.dbt.tests, warehouse_of(loaded)):
            t = o.test
            failures = "-" if o.failures is None else str(o.failures)
            table.add_row(t.name, t.model or "", o.status or "not run", failures, t.severity)
        out.print(table)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


Format = Literal["table", "csv", "json"]


@app.command()
def read(
    pipeline: PipelineFile,
    view: Annotated[str, typer.Argument(help="The view to read.")],
    as_of: Annotated[int | None, typer.Option("--as-of", help="Epoch (default: latest).")] = None,
    fmt: Annotated[Format, typer.Option("--format", help="table, csv or json.")] = "table",
    limit: Annotated[int | None, typer.Option(min=0, help="At most this many rows.")] = None,
) -> None:
    """The view's rows (bag semantics) at the latest or a past epoch, in the order of
    its columns; sorted, so the output is stable."""
    p = _open(pipeline)
    df = p.runtime.read(view, as_of)
    df = df.orderBy(*[c for c in df.columns if orderable(df.schema[c].dataType)])
    if limit is not None:
        df = df.limit(limit)
    title = view if as_of is None else f"{view} @ {as_of}"
    print_rows(df.columns, [tuple(r) for r in df.collect()], fmt, title)


@app.command()
def changes(
    pipeline: PipelineFile,
    view: Annotated[str, typer.Argument(help="The view whose changes to show.")],
    from_epoch: Annotated[int, typer.Option("--from", help="First epoch (inclusive).")],
    to_epoch: Annotated[int, typer.Option("--to", help="Last epoch (exclusive).")],
    fmt: Annotated[Format, typer.Option("--format", help="table, csv or json.")] = "table",
) -> None:
    """The view's changes at epochs [from, to): its columns, ``_epoch`` and ``_diff``
    (+n: n copies of the row added, -n: removed)."""
    from pyspark.sql import functions as F

    p = _open(pipeline)
    df = p.runtime.changes(view, from_epoch, to_epoch)
    data = [c for c in df.columns if c not in ("_time", "_diff")]
    df = df.select(*data, F.col("_time").alias("_epoch"), "_diff")
    df = df.orderBy("_epoch", *[c for c in data if orderable(df.schema[c].dataType)])
    title = f"{view} changes [{from_epoch}, {to_epoch})"
    print_rows(df.columns, [tuple(r) for r in df.collect()], fmt, title)


@app.command()
def verify(
    pipeline: PipelineFile,
    view: Annotated[str | None, typer.Argument(help="Only this view.")] = None,
) -> None:
    """Recompute views from scratch (and re-read sources) and compare; exit status 1
    and the differing rows on a mismatch."""
    from dd_etl.pipeline.verify import verify as check

    p = _open(pipeline)
    report = check(p, None if view is None else [view])
    for item in report.checked:
        ok = not any(m.what in item for m in report.mismatches)
        out.print(f"{'[green]ok[/]' if ok else '[red]MISMATCH[/]'}  {item}", highlight=False)
    for item in report.skipped:
        out.print(f"[yellow]skipped[/]  {item}", highlight=False)
    for m in report.mismatches:
        out.print(
            f"\n[red]{m.what} at epoch {m.epoch}: {m.differences} rows differ[/] "
            "(+n: the recomputation has n more copies, -n: the maintained result has)",
            highlight=False,
        )
        for count, row in m.rows:
            out.print(f"  {count:+d}  {row}", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
def compact(
    pipeline: PipelineFile,
    fuel: Annotated[int | None, typer.Option(help="Records of merge work per trace.")] = None,
) -> None:
    """Merge spine layers of every trace of the pipeline, advance compaction, vacuum."""
    from dd_etl.pipeline.build import session_for
    from dd_etl.pipeline.config import load_config, warehouse_of
    from dd_etl.runtime.sizing import Thresholds
    from dd_etl.trace.maintenance import maintain_warehouse

    loaded = load_config(pipeline)
    c = loaded.config.compaction
    spark = session_for(loaded)
    merged = Thresholds(**loaded.config.sizing.settings()).driver_merge_records
    reports = maintain_warehouse(
        spark, warehouse_of(loaded), fuel or c.fuel, c.retention_hours, merged
    )
    print_maintenance(reports)


@app.command()
def rebuild(
    pipeline: PipelineFile,
    views: Annotated[list[str] | None, typer.Argument(help="Views to recompute.")] = None,
    source: Annotated[
        str | None, typer.Option("--source", help="Take this source in again instead.")
    ] = None,
) -> None:
    """Recompute views (and the views that read them) from scratch at the next run,
    e.g. after their definition changed; or, with ``--source``, take a source in
    again after it lost history."""
    if source is not None:
        from dd_etl.pipeline.rebuild import rebuild_source

        out.print(rebuild_source(pipeline, source), highlight=False)
        return
    if not views:
        fail("name the views to rebuild, or give --source", 2)
    from dd_etl.pipeline.rebuild import rebuild_views

    p = _open(pipeline)
    names = rebuild_views(p, list(views))
    out.print(f"rebuilt {', '.join(names)}: the next `dd-etl run` recomputes them")


@app.command()
def explain(pipeline: PipelineFile, view: Annotated[str, typer.Argument()]) -> None:
    """The plan of differential operators that maintains the view."""
    from dd_etl.pipeline.explain import explain_view

    p = _open(pipeline)
    out.print(explain_view(p, view), highlight=False, markup=False)


@app.command()
def restate(
    pipeline: PipelineFile,
    source: Annotated[str, typer.Argument(help="The source whose data was corrected.")],
    where: Annotated[
        str | None, typer.Option(help="SQL predicate selecting the corrected rows.")
    ] = None,
) -> None:
    """Take in a source's corrected data (files rewritten in place, say) as a change
    at a new epoch: what the source holds now minus what was taken in, for the rows
    ``--where`` selects."""
    from dd_etl.pipeline.restate import restate as restate_source

    p = _open(pipeline)
    with _steps() as progress:
        report = restate_source(p, source, where, progress)
    if report is None:
        out.print(f"{source} matches what was taken in: nothing to restate")
    else:
        out.print(f"restated {source} at epoch {report.epoch}: {report.sources[source]}")


@app.command()
def ui(
    pipeline: PipelineFile,
    port: Annotated[int, typer.Option(help="Port of the Dagster UI.")] = 3000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
) -> None:
    """Start the Dagster UI (and its daemon) on this pipeline: its assets, ticks,
    backfills, checks and maintenance. Runs are kept under the warehouse unless
    DAGSTER_HOME says otherwise."""
    import os
    import shutil

    from dd_etl.dagster.names import PIPELINES_ENV
    from dd_etl.pipeline.config import load_config, warehouse_of

    loaded = load_config(pipeline)
    warehouse = warehouse_of(loaded)
    # Dagster keeps its runs on a local disk: beside the traces when they are local
    local = warehouse.path if warehouse.is_local else loaded.base / f".{loaded.config.name}"
    home = Path(os.environ.get("DAGSTER_HOME") or local / "_dagster")
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()
    dagster = shutil.which("dagster") or str(Path(sys.executable).parent / "dagster")
    env = {**os.environ, "DAGSTER_HOME": str(home), PIPELINES_ENV: str(loaded.file)}
    args = [dagster, "dev", "-m", "dd_etl.dagster.location", "-h", host, "-p", str(port)]
    err.print(f"Dagster UI on http://{host}:{port} (runs kept in {home})", highlight=False)
    os.execve(dagster, args, env)
