"""Where a run's time and Spark jobs go: per trace and per phase.

A run's cost is the number of Spark jobs it launches (each a fixed 0.15 to 0.4 s on
local Spark however little it does) plus the time spent outside them: planning,
Delta log reads and commits, sinks. ``Profiler`` labels every Spark job with the
trace whose work launched it (a Spark job group per trace, set in the thread
doing that work), and low-level code reports the seconds of its phase with
``phase(...)``, which costs nothing when no run is being profiled.

The jobs' stages say what Spark did for each label: tasks, task time, bytes read
and shuffled. A layer's traces share its jobs, so those say what the layer did;
a run asked for its ``operators`` also splits each shared job's executed plan
among the traces that shared it (``spark_driver/plan_metrics.py``): which
trace's part scanned, sorted, aggregated and shuffled what.

Job counts are deterministic for a given dataflow, data and sizing, so tests may
pin them; seconds are only reported, never asserted.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dd_etl.spark_driver import PlanWork, driver_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DELTA_LOG = "delta_log"
SPARK = "spark"
LOOKUPS = "lookups"
SINKS = "sinks"
PLANNING = "planning"
PHASES = (PLANNING, DELTA_LOG, LOOKUPS, SPARK, SINKS)
"""``planning``: building plans in Python and Spark's driver, deciding what is
pending; ``delta_log``: opening trace logs and committing; ``lookups``: reading
the touched keys' history in the driver; ``spark``: waiting for Spark jobs
(writes, small collects); ``sinks``: materialized tables and change feeds.
Seconds of work done side by side in threads are added up."""


@dataclass
class Cost:
    seconds: float = 0.0
    spark_jobs: int | None = 0
    """None where Spark does not tell (``RunProfile.spark``)."""
    spark_stages: int | None = 0
    phases: dict[str, float] = field(default_factory=dict)
    bytes_read: int = 0
    """Bytes of batch files read: by Spark's scans (its stages' input bytes, where
    Spark tells them) and by the driver (the files it opened; a file it holds
    decoded already is not read)."""
    bytes_written: int = 0
    """Bytes of batch files committed: appends and merges, whoever wrote them."""
    grouped: int = 0
    """The Spark jobs its writes were grouped into so that each fits Spark's
    memory (``trace/job_groups.py``); 0 where it made no shared job."""
    tasks: int | None = 0
    task_seconds: float | None = 0.0
    """Its jobs' tasks and their run time summed, where Spark tells them."""
    bytes_shuffled: int = 0
    """What its jobs' stages wrote to shuffle files."""
    shared: PlanWork | None = None
    """Its part of the shared jobs that computed its batch with others', where the
    run was asked for its operators (``Profiler(operators=True)``)."""


@dataclass
class RunProfile:
    """What one run cost: in all, per trace (by trace name) and per phase."""

    seconds: float
    spark_jobs: int | None
    """None over Spark Connect, whose server does not tell a client its jobs; nor
    then the stages or the bytes Spark's scans read (``bytes_read`` counts the
    driver's reads only)."""
    spark_stages: int | None
    sizing: str
    phases: dict[str, float]
    traces: dict[str, Cost]
    layers: list[str] = field(default_factory=list)
    """How each layer of the dataflow ran, in order: the interval's sizing, or
    ``small`` for a layer of a larger one whose traces read few records."""
    layer_traces: list[list[str]] = field(default_factory=list)
    """Each layer's traces, in order: the shared jobs of layer ``i`` are the
    trace ``layer_label(i)``'s."""
    bytes_read: int = 0
    bytes_written: int = 0
    tasks: int | None = None
    task_seconds: float | None = None
    bytes_shuffled: int = 0
    """In all, as ``Cost`` counts them per trace."""
    sinks: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per sink the run committed to: what its commit wrote (``SinkWrite``: the
    operation, rows added and removed, bytes of data files added)."""
    jvm_compiling: float | None = None
    """Seconds the driver JVM's JIT compilers worked during the run, summed over
    their threads (None where the JVM does not tell). Not a phase of the run: it
    happens beside it, on the same cores. A fresh JVM compiles Spark's code for
    its first dozens of small runs, and on two cores that was about half the CPU
    of the first ones (bench/README.md): a long-lived process (``dd-etl server``)
    pays it once."""
    spark: str = "classic"
    """How Spark was reached: ``classic`` (a driver in this process) or ``connect``."""
    commits: int = 0
    """Delta commits the run made: traces' appends, merges and holds, sinks' epochs."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        """A readable breakdown: the run, its sinks, each layer with the cost of its
        shared jobs and then its traces', costliest first, then the traces of no
        layer (sources, sinks)."""
        phases = ", ".join(f"{p} {self.phases.get(p, 0.0):.2f}s" for p in PHASES)
        compiling = (
            ""
            if self.jvm_compiling is None
            else f"; JIT compiling beside the run {self.jvm_compiling:.2f}s"
        )
        jobs = (
            f"{self.spark_jobs} Spark jobs, {self.spark_stages} stages, {self.tasks} tasks "
            f"({self.task_seconds or 0.0:.2f}s task time), {_mb(self.bytes_read)} read, "
            f"{_mb(self.bytes_shuffled)} shuffled"
            if self.spark_jobs is not None
            else f"Spark jobs not reported by Spark {self.spark}, "
            f"{_mb(self.bytes_read)} read by the driver"
        )
        out = [
            f"{self.seconds:.2f}s, {jobs}, {_mb(self.bytes_written)} written, "
            f"{self.commits} Delta commits ({self.sizing} interval)",
            f"  phases (summed over threads): {phases}{compiling}",
        ]
        for name, w in self.sinks.items():
            out.append(
                f"  sink {name}: {w['operation']} +{w['rows_added']} -{w['rows_removed']} rows"
                f"{' (replacing all)' if w['replaced'] else ''}, {_mb(w['bytes_added'])} "
                f"written (table version {w['version']})"
            )
        width = max((len(name) for name in self.traces), default=0)
        placed: set[str] = set()
        for depth, (sizing, names) in enumerate(zip(self.layers, self.layer_traces, strict=True)):
            shared = self.traces.get(layer_label(depth))
            out.append(f"  layer {depth} ({sizing}, {len(names)} traces)")
            if shared is not None:
                out.extend(_layer_lines(shared, width))
            members = [t for t in names if t in self.traces]
            for name in sorted(members, key=lambda t: (-self.traces[t].seconds, t)):
                out.extend(_trace_lines(name, self.traces[name], width, "    "))
            placed |= {layer_label(depth), *names}
        rest = [t for t in self.traces if t not in placed]
        if rest and self.layers:
            out.append("  outside the layers")
        indent = "    " if self.layers else "  "
        for name in sorted(rest, key=lambda t: (-self.traces[t].seconds, t)):
            out.extend(_trace_lines(name, self.traces[name], width, indent))
        return out


def layer_label(depth: int) -> str:
    """What the shared jobs of the run's layer ``depth`` are profiled as."""
    return f"{LAYERS}/{depth}"


LAYERS = "layers"


def _cost_line(c: Cost) -> str:
    parts = ", ".join(f"{p} {s:.2f}s" for p, s in sorted(c.phases.items()) if s >= 0.005)
    jobs = (
        f"{c.spark_jobs:3d} jobs {c.spark_stages:3d} stages {c.tasks:4d} tasks "
        f"{c.task_seconds or 0.0:7.2f}s task time"
        if c.spark_jobs
        else ""
    )
    grouped = f", writes grouped into {c.grouped} jobs" if c.grouped > 1 else ""
    shuffled = f" {_mb(c.bytes_shuffled)} shuffled," if c.bytes_shuffled else ""
    return (
        f"{c.seconds:6.2f}s  {jobs:<52} {_mb(c.bytes_read):>9} read,{shuffled} "
        f"{_mb(c.bytes_written)} written  {parts}{grouped}"
    )


def _trace_lines(name: str, c: Cost, width: int, indent: str) -> list[str]:
    lines = [f"{indent}{name:<{width}}  {_cost_line(c)}"]
    if c.shared is not None:
        lines.append(f"{indent}{'':<{width}}  in shared jobs: {_plan_line(c.shared)}")
    return lines


def _layer_lines(c: Cost, width: int) -> list[str]:
    """A layer's shared jobs and what they did above its traces' parts (the
    exchange, sort and write of the batches)."""
    lines = [f"    {'shared jobs':<{width}}  {_cost_line(c)}"]
    if c.shared is not None and c.shared.operators:
        above = _plan_line(c.shared, rows=False)
        lines.append(f"    {'':<{width}}  above the parts: {above}")
    return lines


def _plan_line(w: PlanWork, rows: bool = True) -> str:
    seconds = ", ".join(f"{k} {w.seconds[k]:.2f}s" for k in sorted(w.seconds))
    operators = " ".join(f"{name} x{k}" for name, k in sorted(w.operators.items()))
    spilled = f", {_mb(w.spilled_bytes)} spilled" if w.spilled_bytes else ""
    counted = f"{w.rows} rows; " if rows else ""
    return (
        f"{counted}task time {w.task_seconds:.2f}s{f' ({seconds})' if seconds else ''}; "
        f"{_mb(w.scanned_bytes)} scanned, {_mb(w.shuffled_bytes)} shuffled{spilled}; {operators}"
    )


class Profiler:
    """Records one run; ``phase`` reports to the profiler active in this process.
    With ``operators``, shared jobs' executed plans are split among the traces
    that shared them (``count_shared``): a few JVM calls per Spark operator."""

    def __init__(self, spark: SparkSession, operators: bool = False) -> None:
        self.spark = spark
        self.operators = operators
        self.sizing = ""  # told by the run once it has sized its interval
        self.layers: list[str] = []  # and each layer's sizing, as it runs them
        self.layer_traces: list[list[str]] = []  # and its traces
        self._tag = f"dd_etl-{uuid.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = defaultdict(float)
        self._phases: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._bytes: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # read, written
        self._commits = 0
        self._grouped: dict[str, int] = defaultdict(int)
        self._shared: dict[str, PlanWork] = defaultdict(PlanWork)
        self._shared_owner: dict[str, str] = {}  # whose jobs computed a trace's part
        self._walked: dict[str, float] = defaultdict(float)  # splitting them, per owner
        self._local = threading.local()
        self._started = time.perf_counter()
        self._run_seconds: float | None = None
        self._depth = 0
        driver = driver_for(spark)
        self._jobs = driver.status()
        self._driver_kind = driver.kind
        # jobs launched by threads that carry no job group are the run's own too
        self._ungrouped_before = max(self._job_ids(None), default=-1)
        self._compiled_before = self._compiled_ms()

    def _compiled_ms(self) -> int | None:
        return None if self._jobs is None else self._jobs.compiled_ms()

    def _job_ids(self, group: str | None) -> list[int]:
        return [] if self._jobs is None else self._jobs.job_ids(group)

    def _label(self, group: str | None) -> None:
        """Label the calling thread's jobs: a JVM call each, so only as a block of
        work begins and ends (``trace``), never to find out the label before."""
        if self._jobs is not None:
            self._jobs.label(group)

    def _group(self, trace: str | None) -> str:
        return self._tag if trace is None else f"{self._tag}/{trace}"

    @staticmethod
    def current() -> Profiler | None:
        """The profiler of the run under way in this process, if any."""
        return _active

    @contextmanager
    def active(self) -> Iterator[Profiler]:
        """Make this the process's profiler, and label the calling thread's jobs as
        the run's own (not any trace's). May be entered again inside itself."""
        global _active
        previous_profiler = _active
        _active = self
        previous = None if self._jobs is None else self._jobs.labelled()
        self._label(self._group(None))
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1
            self._label(previous)
            _active = previous_profiler
            if self._depth == 0:
                self._run_seconds = time.perf_counter() - self._started

    @contextmanager
    def trace(self, name: str) -> Iterator[None]:
        """Attribute the jobs, seconds and phases of the block to trace ``name``;
        after it, the thread's jobs are the outer trace's, or the run's own."""
        outer = getattr(self._local, "trace", None)
        self._label(self._group(name))
        self._local.trace = name
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            self._local.trace = outer
            self._label(self._group(outer))
            with self._lock:
                self._seconds[name] += elapsed

    def add(self, phase: str, seconds: float) -> None:
        owner = getattr(self._local, "trace", None) or ""
        with self._lock:
            self._phases[owner][phase] += seconds

    def add_bytes(self, read: int = 0, written: int = 0) -> None:
        owner = getattr(self._local, "trace", None) or ""
        with self._lock:
            counted = self._bytes[owner]
            counted[0] += read
            counted[1] += written

    def add_commit(self) -> None:
        with self._lock:
            self._commits += 1

    def add_grouped(self, jobs: int) -> None:
        owner = getattr(self._local, "trace", None) or ""
        with self._lock:
            self._grouped[owner] += jobs

    def add_layer(self, sizing: str, traces: list[str]) -> None:
        self.layers.append(sizing)
        self.layer_traces.append(traces)

    def add_shared(self, df: DataFrame, labels: Sequence[str | None]) -> None:
        """Split the work of the job just run on ``df``, a union of a part per label
        (None: the calling thread's trace), among them; what is above the union,
        or all of it if its parts cannot be told apart, is the calling thread's.
        Done right away, so that no plan (nor the rows a plan holds) outlives its
        job; the walk's seconds are kept out of the run's, which a run not asked
        for its operators does not spend."""
        if not self.operators or self._jobs is None:
            return
        started = time.perf_counter()
        owner = getattr(self._local, "trace", None) or ""
        named = [label or owner for label in labels]
        split = self._jobs.plan_parts(df, len(named))
        if split is None:
            split, named = self._jobs.plan_parts(df, 1), [owner]
        assert split is not None  # one part is all of any plan
        rest, parts = split
        with self._lock:
            for label, work in zip([owner, *named], [rest, *parts], strict=True):
                self._shared[label].add(work)
                self._shared_owner[label] = owner
            self._walked[owner] += time.perf_counter() - started

    def result(self) -> RunProfile:
        """The profile, with job counts read from Spark's status tracker where it tells."""

        jobs_of = self._jobs
        if jobs_of is not None:
            jobs_of.settled()

        def counted(ids: list[int]) -> _Jobs:
            if jobs_of is None:
                return _Jobs(None, None, None, None, 0, 0)
            stages = [s for j in ids for s in jobs_of.stages(j)]
            done = [w for w in map(jobs_of.stage_work, set(stages)) if w is not None]
            return _Jobs(
                len(ids),
                len(stages),
                sum(w.tasks for w in done),
                round(sum(w.task_seconds for w in done), 3),
                sum(w.input_bytes for w in done),
                sum(w.shuffle_write_bytes for w in done),
            )

        traces: dict[str, Cost] = {}
        named = set(self._seconds) | {*self._phases} | {*self._bytes} | {*self._grouped}
        for name in sorted(named | {*self._shared}):
            if not name:
                continue
            jobs = counted(self._job_ids(self._group(name)))
            phases = dict(self._phases.get(name, {}))
            spent = self._seconds.get(name, 0.0) - self._walked.get(name, 0.0)
            phases[PLANNING] = max(0.0, spent - sum(phases.values()))
            read, written = self._bytes.get(name, (0, 0))
            traces[name] = Cost(
                round(spent, 3),
                jobs.jobs,
                jobs.stages,
                _rounded(phases),
                jobs.scanned + read,
                written,
                self._grouped.get(name, 0),
                jobs.tasks,
                jobs.task_seconds,
                jobs.shuffled,
                self._shared.get(name),
            )
        _share_task_time(traces, self._shared_owner)
        ungrouped = [j for j in self._job_ids(None) if j > self._ungrouped_before]
        own = counted(self._job_ids(self._group(None)) + ungrouped)
        own_read, own_written = self._bytes.get("", (0, 0))
        walked = sum(self._walked.values())
        seconds = (
            self._run_seconds
            if self._run_seconds is not None
            else time.perf_counter() - self._started
        ) - walked  # the layers' threads walk their own jobs' plans, one after another
        totals: dict[str, float] = defaultdict(float)
        for costs in self._phases.values():
            for p, s in costs.items():
                totals[p] += s
        for c in traces.values():
            totals[PLANNING] += c.phases.get(PLANNING, 0.0)
        traced = sum(self._seconds.values()) - walked
        outside = seconds - traced - sum(self._phases.get("", {}).values())
        totals[PLANNING] += max(0.0, outside)  # the run's own work between traces
        compiled = self._compiled_ms()
        return RunProfile(
            seconds=round(seconds, 3),
            spark_jobs=_total(own.jobs, [c.spark_jobs for c in traces.values()]),
            spark_stages=_total(own.stages, [c.spark_stages for c in traces.values()]),
            sizing=self.sizing,
            layers=list(self.layers),
            layer_traces=[list(t) for t in self.layer_traces],
            bytes_read=own.scanned + own_read + sum(c.bytes_read for c in traces.values()),
            bytes_written=own_written + sum(c.bytes_written for c in traces.values()),
            tasks=_total(own.tasks, [c.tasks for c in traces.values()]),
            task_seconds=(
                None
                if own.task_seconds is None
                else round(own.task_seconds + sum(c.task_seconds or 0 for c in traces.values()), 3)
            ),
            bytes_shuffled=own.shuffled + sum(c.bytes_shuffled for c in traces.values()),
            phases=_rounded(totals),
            traces=traces,
            jvm_compiling=(
                None
                if compiled is None or self._compiled_before is None
                else round((compiled - self._compiled_before) / 1000, 3)
            ),
            spark=self._driver_kind,
            commits=self._commits,
        )


def _share_task_time(traces: dict[str, Cost], owners: Mapping[str, str]) -> None:
    """Each trace's part of shared jobs given its share of their task time, as
    their stages tell it, in proportion to what the operator timers of the
    plans saw in each part (timers overlap and miss a task's start and reads;
    the stages' count is exact), so that the parts add up to the jobs."""
    owned = {label: owner for label, owner in owners.items() if {label, owner} <= traces.keys()}
    timed: dict[str, float] = defaultdict(float)
    for label, owner in owned.items():
        work = traces[label].shared
        timed[owner] += 0.0 if work is None else work.task_seconds
    for label, owner in owned.items():
        c, measured = traces[label], traces[owner].task_seconds
        if c.shared is not None and measured is not None and timed[owner] > 0:
            scale = measured / timed[owner]
            shared = replace(
                c.shared,
                task_seconds=round(c.shared.task_seconds * scale, 3),
                seconds={kind: round(s * scale, 3) for kind, s in c.shared.seconds.items()},
            )
            traces[label] = replace(c, shared=shared)


@dataclass(frozen=True)
class _Jobs:
    """What a label's Spark jobs did, as Spark's status store tells (None: it does not)."""

    jobs: int | None
    stages: int | None
    tasks: int | None
    task_seconds: float | None
    scanned: int
    shuffled: int


_active: Profiler | None = None


def traced(name: str) -> AbstractContextManager[None]:
    """``Profiler.trace(name)`` of the active run, if any: for work a run hands to
    threads of its own."""
    return nullcontext() if _active is None else _active.trace(name)


def current_trace() -> str | None:
    """The trace the calling thread's work is attributed to in the active run, if
    any: for the threads it hands work to (``traced``)."""
    return None if _active is None else getattr(_active._local, "trace", None)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the block's seconds as ``name`` in the active run's profile, if any."""
    profiler = _active
    if profiler is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        profiler.add(name, time.perf_counter() - started)


def count_commit() -> None:
    """Count a Delta commit in the active run's profile, if any."""
    if _active is not None:
        _active.add_commit()


def count_grouped(jobs: int) -> None:
    """Count the Spark jobs that writes sharing jobs were grouped into, in the
    active run's profile, if any."""
    if _active is not None:
        _active.add_grouped(jobs)


def count_shared(df: DataFrame, labels: Sequence[str | None]) -> None:
    """Split the work of the shared job just run on ``df`` among the traces of its
    union's parts (``labels``, None for the calling thread's), where the active
    run, if any, was asked for its operators."""
    if _active is not None:
        _active.add_shared(df, labels)


def count_bytes(read: int = 0, written: int = 0) -> None:
    """Count batch-file bytes the driver read, or a commit added, in the active
    run's profile, if any."""
    if _active is not None:
        _active.add_bytes(read, written)


def _total(own: int | None, counts: list[int | None]) -> int | None:
    """A count summed over the run and its traces; None if Spark did not tell it."""
    if own is None:
        return None
    return own + sum(c or 0 for c in counts)


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def _rounded(phases: dict[str, float]) -> dict[str, float]:
    return {p: round(s, 3) for p, s in phases.items()}
