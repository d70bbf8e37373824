"""Where runs record the empty appends they deferred (``trace/deferred.py``).

One Delta table under the warehouse, ``_deferred_appends``, holds no data: each
of its commits carries, in its commit info, every deferral still recorded, by
trace name. A run that left traces untouched records all of theirs in one
commit, where each trace's own empty append would have been a commit of its
own; a runtime reads the latest record when it opens its traces.

Commits are compare-and-set on the table's version, each merging its deferrals
into the latest record, so runs of other views racing on one warehouse lose
none. A deferral read back applies only where it still holds for the trace's
log (``DeferredAppend.holds_for``), so a record that lags behind the traces,
or one a crash kept from being written at all, is never wrong: the next run
computes those traces' empty intervals again. Deferrals that no longer hold
for a trace the runtime has open are dropped as it records its own.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.transaction import CommitProperties

from dd_etl.failpoints import failpoint
from dd_etl.lake import Location
from dd_etl.profiling import DELTA_LOG, count_commit, phase
from dd_etl.trace import delta_log
from dd_etl.trace.deferred import DeferredAppend
from dd_etl.trace.errors import CommitConflict, TraceNotFound
from dd_etl.trace.state import TraceState

LOG_DIRECTORY = "_deferred_appends"
RECORD_KEY = "dd_etl.deferred_appends"
MAX_COMMIT_ATTEMPTS = 20
_SCHEMA = pa.schema([("trace", pa.string())])
_CONFIGURATION = {"delta.checkpointInterval": str(delta_log.CHECKPOINT_INTERVAL)}
"""Only the latest commit is read: Delta's own expiry of old log entries may stay on."""


@dataclass(frozen=True)
class DeferredRecord:
    """The deferrals recorded at ``version`` of the log (-1: no log yet)."""

    version: int = -1
    appends: Mapping[str, DeferredAppend] = field(default_factory=dict)

    def applied(self, trace: str, state: TraceState) -> TraceState:
        """``state``, as trace ``trace``'s log holds it, with its deferral applied."""
        deferred = self.appends.get(trace)
        return state if deferred is None else deferred.applied_to(state)

    def with_appends(
        self, appends: Mapping[str, DeferredAppend], dropped: Collection[str]
    ) -> dict[str, DeferredAppend]:
        """This record's deferrals without ``dropped``, with ``appends`` over them: of
        two deferrals from the same place, the one reaching further."""
        merged = {name: a for name, a in self.appends.items() if name not in dropped}
        for name, new in appends.items():
            old = merged.get(name)
            if old is None or not _reaches(old, new):
                merged[name] = new
        return merged


def _reaches(old: DeferredAppend, new: DeferredAppend) -> bool:
    """Whether ``old`` defers from where ``new`` does, at least as far."""
    same_start = (old.generation, old.lower) == (new.generation, new.lower)
    return same_start and new.upper.less_equal(old.upper)


def log_location(warehouse: Location) -> Location:
    return warehouse / LOG_DIRECTORY


def read(warehouse: Location) -> DeferredRecord:
    """The latest record of the warehouse's deferrals (empty when none was made)."""
    with phase(DELTA_LOG):
        return _read(log_location(warehouse))


def _read(where: Location) -> DeferredRecord:
    try:
        table = delta_log.open_table(where)
    except TraceNotFound:
        return DeferredRecord()
    version, text = delta_log.latest_recorded(table, RECORD_KEY)
    appends = {name: DeferredAppend.from_json(a) for name, a in json.loads(text).items()}
    return DeferredRecord(version, appends)


def record(
    warehouse: Location, appends: Mapping[str, DeferredAppend], dropped: Collection[str]
) -> DeferredRecord:
    """Commit ``appends`` into the latest record, without ``dropped``; returns the
    record committed."""
    with phase(DELTA_LOG):
        committed = _record(log_location(warehouse), appends, dropped)
    failpoint("deferred.recorded")
    return committed


def _record(
    where: Location, appends: Mapping[str, DeferredAppend], dropped: Collection[str]
) -> DeferredRecord:
    for _ in range(MAX_COMMIT_ATTEMPTS):
        latest = _read(where)
        merged = latest.with_appends(appends, dropped)
        if latest.version >= 0 and merged == latest.appends:
            return latest
        text = json.dumps({k: merged[k].to_json() for k in sorted(merged)})
        properties = CommitProperties(custom_metadata={RECORD_KEY: text}, max_commit_retries=0)
        try:
            if latest.version < 0:
                DeltaTable.create(
                    where.uri,
                    _SCHEMA,
                    mode="error",
                    name=LOG_DIRECTORY,
                    description="dd_etl deferred empty appends",
                    configuration=_CONFIGURATION,
                    commit_properties=properties,
                    storage_options=where.delta_options,
                )
            else:
                table = delta_log.open_table(where, latest.version)
                table.create_write_transaction(
                    [], "append", table.schema(), commit_properties=properties
                )
        except DeltaError as e:
            if _version(where) == latest.version:
                raise CommitConflict(f"{where}: the deferred appends' commit failed: {e}") from e
            continue  # another run recorded first: merge into its record
        count_commit()
        return DeferredRecord(latest.version + 1, merged)
    raise CommitConflict(
        f"{where}: gave up recording deferred appends after {MAX_COMMIT_ATTEMPTS} "
        "conflicting commits"
    )


def _version(where: Location) -> int:
    try:
        return delta_log.open_table(where).version()
    except TraceNotFound:
        return -1
