"""What a materialization tells about the asset, read from trace state and, for a
view's row count and preview, from its files in the driver (``trace/summary.py``):
one column of the view's files and a few keys' rows, where two Spark jobs each
read and consolidated the whole view every tick."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import dagster as dg

from dd_etl.pipeline.build import Pipeline
from dd_etl.plan import nodes as n
from dd_etl.plan.refresh import RefreshChoice
from dd_etl.profiling import RunProfile
from dd_etl.runtime.runner import Runtime
from dd_etl.trace.delta_trace import DeltaTrace
from dd_etl.trace.state import TraceState

PREVIEW_ROWS = 10


def frontiers(state: TraceState) -> dict[str, Any]:
    return {
        "upper": state.upper.epoch_bound(),
        "since": state.since.epoch_bound(),
        "batches": len(state.batches),
        "records": state.records,
    }


def source_metadata(pipeline: Pipeline, source: str, epoch: int, taken: str) -> dict[str, Any]:
    state = pipeline.runtime.trace(pipeline.flow.sources[source]).reload()
    new = sum(b.records for b in state.batches if b.description.lower.epoch_bound() == epoch)
    f = frontiers(state)
    return {
        "epoch": epoch,
        "taken in": taken,
        "rows in": new,
        "upper": f["upper"],
        "since": f["since"],
        "batches": f["batches"],
        "dagster/row_count": f["records"],
    }


def view_metadata(
    pipeline: Pipeline,
    view: str,
    lower: int,
    written: int,
    seconds: float,
    refresh: RefreshChoice | None = None,
    profile: RunProfile | None = None,
) -> dict[str, Any]:
    """Epochs ``[lower, upper)`` processed, how (incrementally or recomputed, and
    why), frontiers, rows in (source updates in those epochs) and out (changes
    written), the batches of every trace the view is computed from, Spark time,
    the Spark jobs and seconds of its traces and of the whole run, current row
    count and a preview."""
    rt = pipeline.runtime
    trace = rt.trace(pipeline.flow.views[view])
    f = frontiers(trace.reload())
    upper = f["upper"] or 0
    rows_in = 0
    traces: dict[str, int] = {}
    recomputed = [view] if refresh is not None and refresh.mode == "full" else []
    for x in rt.stateful_nodes([view], recomputed):
        assert x.trace_name is not None
        state = rt.trace(x).reload()
        traces[x.trace_name] = len(state.batches)
        if isinstance(x, n.Source):
            rows_in += sum(
                b.records
                for b in state.batches
                if lower <= (b.description.lower.epoch_bound() or 0) < upper
            )
    columns, preview = _preview(rt, view, trace)
    return {
        "epochs": f"{lower}..{upper - 1}" if upper > lower else "none (up to date)",
        "refresh": str(refresh) if refresh is not None else "nothing to compute",
        "upper": upper,
        "since": f["since"],
        "rows in": rows_in,
        "rows out": written,
        "batches": f["batches"],
        "trace batches": dg.MetadataValue.json(traces),
        "spark seconds": round(seconds, 2),
        **_cost(profile, traces),
        **_sink_writes(profile, view),
        "dagster/row_count": trace.size(),
        "preview": dg.MetadataValue.md(markdown_table(columns, preview)),
    }


def _preview(rt: Runtime, view: str, trace: DeltaTrace) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The view's first rows, read in the driver, or by Spark where the driver
    declines (nested columns, too many records to read)."""
    rows = trace.first_rows(PREVIEW_ROWS)
    if rows is not None:
        return rows.column_names, [tuple(r.values()) for r in rows.to_pylist()]
    df = rt.read(view)
    return df.columns, [tuple(r) for r in df.limit(PREVIEW_ROWS).collect()]


def _cost(profile: RunProfile | None, traces: Collection[str]) -> dict[str, Any]:
    """Spark jobs and seconds of the view's traces in this run, and of the run."""
    if profile is None:
        return {}
    mine = [profile.traces[t] for t in traces if t in profile.traces]
    jobs = [c.spark_jobs for c in mine]
    return {
        "spark jobs": None if None in jobs else sum(j or 0 for j in jobs),
        "trace seconds": round(sum(c.seconds for c in mine), 2),
        "run cost": dg.MetadataValue.json(
            {
                "seconds": profile.seconds,
                "spark_jobs": profile.spark_jobs,
                "spark_stages": profile.spark_stages,
                "bytes_read": profile.bytes_read,
                "bytes_written": profile.bytes_written,
                "sizing": profile.sizing,
                "phases": profile.phases,
                "jvm_compiling": profile.jvm_compiling,
                "spark": profile.spark,
            }
        ),
    }


def _sink_writes(profile: RunProfile | None, view: str) -> dict[str, Any]:
    """What the view's sinks' commits wrote in this run: rows added and removed,
    bytes of files added, per sink."""
    mine = (
        {}
        if profile is None
        else {name: w for name, w in profile.sinks.items() if name.startswith(f"{view} (")}
    )
    return {"sink writes": dg.MetadataValue.json(mine)} if mine else {}


def markdown_table(columns: list[str], rows: list[Any]) -> str:
    def cell(value: Any) -> str:
        return "NULL" if value is None else str(value).replace("|", "\\|")

    head = f"| {' | '.join(columns)} |\n|{'---|' * len(columns)}\n"
    body = "".join(f"| {' | '.join(cell(v) for v in row)} |\n" for row in rows)
    return head + (body or f"| {' | '.join('' for _ in columns)} |\n")
