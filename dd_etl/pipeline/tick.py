"""One ingest tick: take in every source's changes as a new epoch, bring every view
up to date, and update the sinks.

0. Views whose definition changed since their results were computed are
   rebuilt: discarded, and recomputed by this tick's run (``rebuild.start_over``).
1. The epoch: the sources' least upper, unless a previous tick crashed after some
   source appended (sources ahead of the last completed tick): then that
   interrupted epoch is completed instead of starting a new one.
2. Each source that has not appended the epoch captures its changes since the
   position its last epoch covered and appends them with the new position as
   trace meta, in one commit (a source added later first gets empty epochs).
3. ``Runtime.run`` computes every view for the pending epochs (first discarding
   what was computed from a source's history that was started over).
4. Each sink commits the epoch once (Delta application transactions).
5. The tick is recorded as completed.

Every step is idempotent, so a crash anywhere and a re-run give the result of one
clean run. Nothing here knows about the CLI: Dagster assets call the same code.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field

from dd_etl.failpoints import failpoint
from dd_etl.pipeline.build import Pipeline
from dd_etl.pipeline.ingest import ingest
from dd_etl.pipeline.lock import tick_lock
from dd_etl.pipeline.progress import Progress
from dd_etl.pipeline.rebuild import refuse_strict, start_over
from dd_etl.pipeline.tick_record import TickRecord, last_tick, record_profile, record_tick
from dd_etl.plan import nodes as n
from dd_etl.plan.refresh import RefreshChoice
from dd_etl.profiling import SINKS, Profiler, RunProfile, phase
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.sizing import SMALL, applied
from dd_etl.sinks.delta_table import EpochCommit, SinkWrite
from dd_etl.sources.base import Capture
from dd_etl.spark import command_movable
from dd_etl.spark_driver import driver_for
from dd_etl.trace.batch_writer import write_together
from dd_etl.trace.placement import Placement


@dataclass
class TickReport:
    epoch: int
    resumed: bool  # completed a tick that had crashed
    rebuilt: dict[str, str] = field(default_factory=dict)  # views recomputed whole, and why
    sources: dict[str, str] = field(default_factory=dict)
    views: dict[str, int] = field(default_factory=dict)
    refresh: dict[str, RefreshChoice] = field(default_factory=dict)  # views that computed
    sinks: dict[str, str] = field(default_factory=dict)
    sink_writes: dict[str, SinkWrite] = field(default_factory=dict)  # the sinks committed
    seconds: float = 0.0
    complete: bool = False  # every source, view and sink has the epoch
    profile: RunProfile | None = None  # Spark jobs and seconds, per trace and phase


def _quiet(step: str, detail: str, done: float = 1.0) -> None:
    pass


def next_epoch(pipeline: Pipeline) -> tuple[int, bool]:
    """The epoch this tick works on, and whether it completes an interrupted one."""
    rt = pipeline.runtime
    uppers = [epoch_of(rt.trace(s).reload().upper) for s in pipeline.flow.sources.values()]
    done = last_tick(pipeline.warehouse)
    completed = -1 if done is None else done.epoch
    ahead = max(uppers)
    if ahead > completed + 1:
        return ahead - 1, True
    return min(ahead, completed + 1) if done is not None else ahead, False


def run_tick(
    pipeline: Pipeline,
    progress: Progress = _quiet,
    *,
    sources: Collection[str] | None = None,
    views: Collection[str] | None = None,
    limit: int | None = None,
    captures: Mapping[str, Capture] | None = None,
    operators: bool = False,
) -> TickReport:
    """One tick, or the part of it that ``sources`` and ``views`` select (default:
    all). A partial tick leaves the epoch open: the next tick completes it before
    a new one starts, so sources never run more than one epoch ahead of views.
    ``limit`` caps each source's new files or versions; ``captures`` replaces a
    source's capture (a restatement); ``operators`` profiles each trace's part of
    its layer's shared Spark jobs too (``Profiler``)."""
    with tick_lock(pipeline):
        return tick_holding_lock(
            pipeline, progress, sources, views, limit, captures or {}, operators
        )


def tick_holding_lock(
    pipeline: Pipeline,
    progress: Progress,
    sources: Collection[str] | None,
    views: Collection[str] | None,
    limit: int | None,
    captures: Mapping[str, Capture],
    operators: bool = False,
) -> TickReport:
    """``run_tick`` for a caller that holds ``tick_lock`` (and decided what to
    capture under it)."""
    started = time.time()
    rt = pipeline.runtime
    chosen = list(pipeline.flow.views) if views is None else list(views)
    for view in chosen:  # before anything is committed
        for sink in (pipeline.materialized(view), pipeline.change_feed(view)):
            if sink is not None:
                sink.table.check_ours()
    edited = rt.changed_plans(chosen)
    refuse_strict(pipeline, edited)
    changed = start_over(pipeline, edited)
    rebuilt = {view: "its definition changed" for view in changed}
    epoch, resumed = next_epoch(pipeline)
    report = TickReport(epoch, resumed, rebuilt=rebuilt)
    profiler = Profiler(rt.spark, operators)
    with profiler.active():
        names = list(pipeline.flow.sources if sources is None else sources)
        report.sources = ingest(pipeline, names, epoch, limit, captures, progress, profiler)
        failpoint("tick.sources_appended")
        if chosen:
            progress("run", "", 0.0)
            report.refresh = rt.choose_refresh(chosen)
            recomputed = [v for v, c in report.refresh.items() if c.mode == "full"]
            for view, choice in report.refresh.items():
                progress(f"refresh:{view}", str(choice))
            on_trace = _per_view(pipeline, chosen, recomputed, progress)
            run = rt.run(on_trace, views=chosen, refresh=report.refresh)
            for view in run.started_over:
                report.rebuilt.setdefault(view, "a source it reads started over")
            report.views = {v: run.views.get(v, 0) for v in chosen}
            done = f"epochs {run.lower}..{run.upper - 1}" if run.epochs else "up to date"
            progress("run", done)
        # a view waits for every source it reads to take the epoch in
        nodes = pipeline.flow.views
        computed = [v for v in chosen if epoch_of(rt.trace(nodes[v]).state.upper) > epoch]
        writes = sync_sinks(pipeline, computed, epoch, progress, profiler)
        report.sinks.update({name: _said(w) for name, w in writes.items()})
        report.sink_writes = {name: w for name, w in writes.items() if w is not None}
        failpoint("tick.sinks_committed")
    command_movable(False)  # starting the command over would run this tick again
    report.profile = profiler.result()
    report.profile.sinks = {name: asdict(w) for name, w in report.sink_writes.items()}
    record_profile(pipeline.warehouse, epoch, report.profile)
    report.seconds = time.time() - started
    report.complete = epoch_complete(pipeline, epoch)
    if report.complete:
        record_tick(
            pipeline.warehouse,
            TickRecord(epoch, started, time.time(), dict(report.sources), dict(report.views)),
        )
    return report


def sync_sinks(
    pipeline: Pipeline, views: list[str], epoch: int, progress: Progress, profiler: Profiler
) -> dict[str, SinkWrite | None]:
    """Commit ``epoch`` to the sinks of ``views``: per sink, what it wrote (None: it
    had the epoch already). One Spark job computes the rows of the sinks of all
    views of a small interval's size, and the driver writes them; a larger
    view's are written by Spark, sized for it."""
    rt = pipeline.runtime
    size = rt.thresholds.for_records
    sizings = {v: size(rt.trace(pipeline.flow.views[v]).state.records) for v in views}
    small = [v for v in views if sizings[v].driver_rows]
    writes: dict[str, SinkWrite | None] = {}
    if small:
        with profiler.trace("sinks"), phase(SINKS), applied(rt.spark, SMALL):
            writes |= _commit(pipeline, small, epoch, progress, SMALL.placement)
    for view in (v for v in views if v not in small):
        with profiler.trace(f"sink {view}"), phase(SINKS), applied(rt.spark, sizings[view]):
            writes |= _commit(pipeline, [view], epoch, progress, sizings[view].placement)
    return writes


def _said(write: SinkWrite | None) -> str:
    return "already there" if write is None else "committed"


def _commit(
    pipeline: Pipeline, views: list[str], epoch: int, progress: Progress, placement: Placement
) -> dict[str, SinkWrite | None]:
    """Commit ``epoch`` to the sinks of ``views``, read as ``placement`` says; in the
    driver's, their rows computed by one Spark job (``write_together``)."""
    planned = {v: _sinks(pipeline, v, epoch, placement) for v in views}
    for view in (v for v, sinks in planned.items() if sinks):
        progress(f"sink:{view}", "", 0.0)
    commits = [c for sinks in planned.values() for _, c in sinks if c is not None]
    done = write_together(commits, placement, driver_for(pipeline.runtime.spark).memory())
    wrote = iter(done)
    writes: dict[str, SinkWrite | None] = {}
    for view, sinks in planned.items():
        for name, commit in sinks:
            writes[name] = None if commit is None else next(wrote)
        if sinks:
            said = [_said(writes[name]) for name, _ in sinks]
            progress(f"sink:{view}", "committed" if "committed" in said else "already there")
    return writes


def _sinks(
    pipeline: Pipeline, view: str, epoch: int, placement: Placement
) -> list[tuple[str, EpochCommit | None]]:
    """The view's sinks, by name, with the commit each needs (None: none)."""
    planned: list[tuple[str, EpochCommit | None]] = []
    table = pipeline.materialized(view)
    if table is not None:
        changed = may_have_changed(pipeline, view, epoch)
        planned.append((f"{view} (materialized)", table.plan(epoch, changed, placement)))
    feed = pipeline.change_feed(view)
    if feed is not None:
        planned.append((f"{view} (changes)", feed.plan(epoch, placement)))
    return planned


def epoch_complete(pipeline: Pipeline, epoch: int) -> bool:
    """Every source took the epoch in, every view computed it, every sink holds it
    (read from trace and sink logs, no Spark job)."""
    rt = pipeline.runtime
    nodes = [*pipeline.flow.sources.values(), *pipeline.flow.views.values()]
    if any(epoch_of(rt.trace(x).reload().upper) <= epoch for x in nodes):
        return False
    for view in pipeline.flow.views:
        for sink in (pipeline.materialized(view), pipeline.change_feed(view)):
            if sink is None:
                continue
            held = sink.table.epoch()
            if held is None or held < epoch:
                return False
    return True


def _per_view(
    pipeline: Pipeline, views: list[str], recomputed: list[str], progress: Progress
) -> Callable[[n.Node], None]:
    """A callback for each trace the run brings up to date, reported as the share of
    each view's traces done (traces shared by views count for each)."""
    rt = pipeline.runtime
    traces = {
        view: {x.id for x in rt.stateful_nodes([view], recomputed) if x.inputs} for view in views
    }
    done = dict.fromkeys(traces, 0)
    lock = threading.Lock()
    for view in traces:
        progress(f"view:{view}", "", 0.0)

    def finished(node: n.Node) -> None:
        with lock:
            for view, ids in traces.items():
                if node.id in ids:
                    done[view] += 1
                    share = done[view] / len(ids)
                    progress(f"view:{view}", f"{done[view]}/{len(ids)} traces", share)

    return finished


def may_have_changed(pipeline: Pipeline, view: str, epoch: int) -> bool:
    """False only if no batch of the view's trace that can hold ``epoch`` has records
    (read from the trace state, no Spark job)."""
    trace = pipeline.runtime.trace(pipeline.flow.views[view])
    for batch in trace.state.batches:
        d = batch.description
        if (
            batch.records
            and d.lower.less_equal_time((epoch,))
            and not d.upper.less_equal_time((epoch,))
        ):
            return True
    return False
