"""Where a pipeline stands, read from the Delta logs of its traces (no Spark job).

Per source: frontiers, batches, records, what its last epoch covered and how far
the source has moved on since. Per view: frontiers, batches, records, lag
(epochs the sources have that the view has not computed yet), and per sink the
epoch it holds and what that epoch's commit wrote. Plus the last tick.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from dd_etl.lake import Location
from dd_etl.pipeline.analysis import view_order
from dd_etl.pipeline.build import make_reader
from dd_etl.pipeline.config import LoadedConfig, warehouse_of
from dd_etl.pipeline.tick_record import last_profile, last_tick
from dd_etl.sources.base import POSITION_META
from dd_etl.trace import deferred_log, delta_log
from dd_etl.trace.deferred_log import DeferredRecord
from dd_etl.trace.errors import TraceNotFound
from dd_etl.trace.maintenance import find_traces

NO_SPARK: Any = None  # readers asked only for listings and Delta logs need no session


@dataclass
class TraceStatus:
    name: str
    upper: int | None  # next epoch the trace will take (None: no trace yet)
    since: int | None
    batches: int = 0
    records: int = 0
    lag: str = ""
    position: Any = None
    sinks: dict[str, int | None] = field(default_factory=dict)  # epoch each sink holds
    sink_writes: dict[str, Any] = field(default_factory=dict)  # its last epoch's commit


@dataclass
class PipelineStatus:
    pipeline: str
    warehouse: str
    sources: list[TraceStatus]
    views: list[TraceStatus]
    internal_traces: int
    internal_records: int
    last_tick: dict[str, Any] | None
    last_run: dict[str, Any] | None = None  # the last tick's epoch and cost profile
    driver_memory: str = ""  # what the pipeline's Spark driver runs with, and why

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _trace(warehouse: Location, trace: str, name: str, deferred: DeferredRecord) -> TraceStatus:
    """The trace as a run would read it: its log, and the empty append deferred
    from there, if any."""
    try:
        snapshot = delta_log.load(warehouse / trace)
    except TraceNotFound:
        return TraceStatus(name, None, None, lag="not computed yet")
    s = deferred.applied(trace, snapshot.state)
    position = s.meta_map.get(POSITION_META)
    return TraceStatus(
        name,
        s.upper.epoch_bound(),
        s.since.epoch_bound(),
        len(s.batches),
        s.records,
        position=None if position is None else json.loads(position),
    )


def pipeline_status(loaded: LoadedConfig, spark: Any = None) -> PipelineStatus:
    config = loaded.config
    view_order(loaded)  # the whole file is checked, as for a run
    warehouse = warehouse_of(loaded)
    deferred = deferred_log.read(warehouse)
    sources = []
    for name, source in config.sources.items():
        st = _trace(warehouse, f"sources/{name}", name, deferred)
        reader = make_reader(spark, loaded, name, source)
        st.lag = reader.lag(st.position)
        if isinstance(st.position, dict) and "files" in st.position:
            st.position = {"files": len(st.position["files"])}
        sources.append(st)
    uppers = [s.upper for s in sources if s.upper is not None]
    sources_upper = min(uppers) if len(uppers) == len(sources) else 0
    views = []
    from dd_etl.sinks.delta_table import SinkTable  # deltalake only

    for name, view in config.views.items():
        st = _trace(warehouse, f"views/{name}", name, deferred)
        if st.upper is not None:
            behind = sources_upper - st.upper
            st.lag = (
                f"{behind} epoch{'s' if behind != 1 else ''} behind" if behind else "up to date"
            )
        for kind, sink in (("materialize", view.materialize), ("changes", view.changes)):
            if sink is not None:
                where = loaded.location(f"views.{name}.{kind}.path", sink.path)
                table = SinkTable(where, config.name, name, kind)
                log = table.log()
                st.sinks[kind] = None if log is None else log.epoch
                written = None if log is None else log.last_write()
                if written is not None:
                    st.sink_writes[kind] = asdict(written)
        views.append(st)
    internal = 0
    internal_records = 0
    for kind in ("arrangements", "reductions"):
        for where in find_traces(warehouse / kind):
            internal += 1
            internal_records += delta_log.load(where).state.records
    tick = last_tick(warehouse)
    return PipelineStatus(
        config.name,
        str(warehouse),
        sources,
        views,
        internal,
        internal_records,
        None if tick is None else tick.to_json(),
        last_profile(warehouse),
        config.spark.driver_memory(),
    )


def tick_due(loaded: LoadedConfig) -> str | None:
    """Why a tick has work to do, or None: a source has data its position does not
    cover, or the last tick's epoch is unfinished. Reads logs and listings only, so
    schedules and sensors can ask often and a tick with nothing new costs nothing."""
    warehouse = warehouse_of(loaded)
    uppers = []
    for name, source in loaded.config.sources.items():
        st = _trace(warehouse, f"sources/{name}", name, DeferredRecord())
        uppers.append(st.upper or 0)
        if not make_reader(NO_SPARK, loaded, name, source).caught_up(st.position):
            return f"source {name} has new data"
    tick = last_tick(warehouse)
    if uppers and max(uppers) > (-1 if tick is None else tick.epoch) + 1:
        return f"epoch {max(uppers) - 1} is unfinished"
    return None


def source_signatures(loaded: LoadedConfig) -> dict[str, str]:
    """A token per source that changes when it gets new data (see ``SourceReader``)."""
    return {
        name: make_reader(NO_SPARK, loaded, name, source).signature()
        for name, source in loaded.config.sources.items()
    }
