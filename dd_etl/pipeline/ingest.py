"""A tick's sources taking their changes in as its epoch.

Each source that has not appended the epoch captures its changes since the
position its last epoch covered (``sources/``) and appends them with the new
position as trace meta, in one commit (a source added later first gets empty
epochs). The changes of every source of a small interval's size are computed by
one Spark job into the driver, which writes each source's batch, as a layer's
batches are (``trace/batch_writer.py``); a larger source's are written by Spark,
sized for them. A source whose data Spark cannot take in fails naming the
source: when the shared job fails, each source is taken in by itself, and a
value that cannot be cast is named with its file, line and column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException

from dd_etl.errors import DdEtlError, HistoryLost, PipelineError, SourceError, first_line
from dd_etl.lattice import Antichain
from dd_etl.pipeline.build import Pipeline
from dd_etl.pipeline.progress import Progress
from dd_etl.profiling import Profiler
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.runner import source_records
from dd_etl.runtime.sizing import SMALL, Sizing, applied, records_at_most
from dd_etl.sources.base import Capture, encode_position, read_position
from dd_etl.spark import full_compiler_for
from dd_etl.spark_driver import driver_for
from dd_etl.trace.batch_writer import Computed, TraceAppend, write_together
from dd_etl.trace.delta_trace import PlannedBatch
from dd_etl.trace.executor_writes import ExecutorBatch
from dd_etl.trace.job_groups import WriteCost

Locate = Callable[[], str | None]
"""Where in a source a value lies that cannot be cast (``Capture.locate``)."""
_SPARK_ERRORS = (PySparkException, Py4JJavaError)
_FILE_GONE = ("FileNotFoundException", "FILE_NOT_EXIST", "DELTA_CHANGE_DATA_FILE_NOT_FOUND")
"""How Spark's errors say that a file a read planned on no longer exists."""


@dataclass(frozen=True)
class _Captured:
    """A source's changes for the epoch, planned and not yet appended: a write
    (``batch_writer.Write``) whose failure names the source."""

    pipeline: str
    name: str
    append: TraceAppend
    summary: str
    sizing: Sizing
    locate: Locate | None = None
    """Where a value of the changes that cannot be cast lies (``Capture.locate``)."""

    def to_collect(self) -> PlannedBatch | None:
        return self.append.to_collect()

    def to_write_on_executors(self) -> ExecutorBatch | None:
        return self.append.to_write_on_executors()

    @property
    def cost(self) -> WriteCost:
        return self.append.cost

    def commit(self, computed: Computed | None) -> bool:
        with taken_in(self.pipeline, self.name, self.locate):
            return self.append.commit(computed)


def ingest(
    pipeline: Pipeline,
    names: Sequence[str],
    epoch: int,
    limit: int | None,
    captures: Mapping[str, Capture],
    progress: Progress,
    profiler: Profiler,
) -> dict[str, str]:
    """Append the changes of the sources ``names`` as ``epoch``, each unless it
    already has; what each took in, by source. The changes of the small ones are
    computed by one Spark job (per eight); when it fails, each source is taken
    in by itself, and its error names it."""
    rt = pipeline.runtime
    said: dict[str, str] = {}
    small: list[_Captured] = []
    for name in names:
        progress(f"source:{name}", "", 0.0)
        with profiler.trace(f"ingest {name}"):
            captured = _capture(pipeline, name, epoch, limit, captures.get(name))
            if isinstance(captured, str):
                said[name] = captured  # taken in before
            elif captured.sizing.placement.driver:
                small.append(captured)
            else:
                with applied(rt.spark, captured.sizing):
                    captured.commit(None)
                said[name] = captured.summary
        if name in said:
            progress(f"source:{name}", said[name])
    if small:
        with profiler.trace("ingest"), applied(rt.spark, SMALL):
            try:
                write_together(small, SMALL.placement, driver_for(rt.spark).memory())
            except _SPARK_ERRORS:
                for captured in small:
                    captured.commit(None)
        for captured in small:
            said[captured.name] = captured.summary
            progress(f"source:{captured.name}", captured.summary)
    return said


def _capture(
    pipeline: Pipeline, name: str, epoch: int, limit: int | None, given: Capture | None
) -> _Captured | str:
    """Source ``name``'s changes for ``epoch``, or what it says if it already has
    them (``given`` replaces its own capture: a restatement)."""
    rt = pipeline.runtime
    node = pipeline.flow.sources.get(name)
    if node is None:
        raise PipelineError(f"unknown source {name!r}; sources are {sorted(pipeline.flow.sources)}")
    trace = rt.trace(node)
    upper = epoch_of(trace.reload().upper)
    if upper > epoch:
        return "already taken in"
    if upper < epoch:  # a source new to the pipeline: empty before its first epoch
        empty = pipeline.flow.empty_updates(node.schema)
        trace.compare_and_append(empty, Antichain.from_epoch(upper), Antichain.from_epoch(epoch))
    with taken_in(str(pipeline.file), name):
        taken = given or pipeline.readers[name].capture(
            read_position(trace), trace, node.schema, limit
        )
    with taken_in(str(pipeline.file), name, taken.locate):
        changes = taken.changes
        if changes is None:
            changes = pipeline.flow.empty_updates(node.schema).drop("_time")
        estimated = driver_for(changes.sparkSession).estimated_bytes(changes)
        full_compiler_for(records_at_most(estimated))
        sizing = rt.thresholds.for_bytes(estimated)
        updates = rt.source_updates(name, changes, epoch)
        records = source_records(updates, sizing)
    append = TraceAppend(
        trace,
        updates,
        Antichain.from_epoch(epoch),
        Antichain.from_epoch(epoch + 1),
        sizing.placement,
        at_most=records,
        meta=encode_position(taken.position),
    )
    return _Captured(str(pipeline.file), name, append, taken.summary, sizing, taken.locate)


@contextmanager
def taken_in(pipeline: str, name: str, locate: Locate | None = None) -> Iterator[None]:
    """Spark's failure to take a source's data in, as an error naming the source
    and, where ``locate`` finds a value that cannot be cast, where it lies: a file
    of the source's history that is gone (vacuumed, deleted) as lost history."""
    try:
        yield
    except _SPARK_ERRORS as e:
        said = first_line(e)
        if any(sign in said for sign in _FILE_GONE):
            raise HistoryLost(pipeline, name, f"a file it had not read is gone ({said})") from e
        where = _located(locate)
        raise SourceError(name, f"its new data cannot be taken in: {where}{said}") from e


def _located(locate: Locate | None) -> str:
    """What ``locate`` finds, to lead the error with: empty when it finds nothing or
    cannot look (Spark's error is reported all the same)."""
    if locate is None:
        return ""
    try:
        found = locate()
    except (*_SPARK_ERRORS, DdEtlError, OSError):
        return ""
    return "" if found is None else f"{found}: "
