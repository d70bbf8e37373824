"""The Delta log of a trace: where its state and its batch files are committed together.

Each commit carries the full new ``TraceState`` in its commit info and the add and
remove actions of the files that realise it, so a reader that opens any Delta
version sees a spine and a set of files that agree. Commits are compare-and-set
on the Delta version (``max_commit_retries=0``): a writer that lost a race gets
``StaleVersion`` and re-applies its transition to the newer state. Appends are
also tagged with a Delta application transaction ``(trace app id, upper epoch)``
so external tools see which intervals a trace has taken in.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections import defaultdict
from dataclasses import replace

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from dd_etl.errors import StoreError, first_line
from dd_etl.lake import Location
from dd_etl.lake.objects import StoredObject
from dd_etl.trace.batch import DataFile, batch_id_of_path
from dd_etl.trace.columns import KEY_HASH, time_columns
from dd_etl.trace.errors import TraceNotFound
from dd_etl.trace.file_stats import make_stats
from dd_etl.trace.open_tables import LoadedSnapshots, OpenTables, commit_stamp, latest_at
from dd_etl.trace.state import TraceState
from dd_etl.trace.storage import Commit, Snapshot, StaleVersion

STATE_KEY = "dd_etl.trace_state"
CHECKPOINT_INTERVAL = 10
"""Commits between Delta checkpoints of a trace. An open replays every commit
since the latest checkpoint, each carrying the whole trace state, and a trace
is opened dozens of times an epoch: at delta-rs's default of 100 an open cost
several times what it does just after a checkpoint."""
TABLE_CONFIGURATION = {
    # The log grows by a commit per step, and only the newest state is ever read:
    # ``clean_log`` (run by vacuum) shortens it. Delta's own expiry is off because
    # it could take the latest state out of the log of a trace that saw only
    # other tools' commits (vacuums) for a week.
    "delta.enableExpiredLogCleanup": "false",
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
}
OPERATION_KEY = "dd_etl.operation"


def app_id(state: TraceState) -> str:
    return f"dd_etl/{state.name}"


def open_table(where: Location, version: int | None = None) -> DeltaTable:
    try:
        return DeltaTable(where.uri, version=version, storage_options=where.delta_options)
    except TableNotFoundError as e:
        raise TraceNotFound(where.uri) from e


_opened = OpenTables(open_table)
_loaded = LoadedSnapshots()


def read_state(table: DeltaTable) -> TraceState:
    """The state committed last at or before the table's version."""
    return latest_state(table)[1]


def latest_state(table: DeltaTable) -> tuple[int, TraceState]:
    """The state committed last at or before the table's version, and that commit's
    version. Commits by other Delta tools (e.g. vacuum) carry no state; look past them.
    """
    version, text = latest_recorded(table, STATE_KEY)
    return version, TraceState.from_json(text)


def latest_recorded(table: DeltaTable, key: str) -> tuple[int, str]:
    """What the last commit at or before the table's version that recorded ``key``
    in its commit info recorded, and that commit's version."""
    limit = 1
    while True:
        history = table.history(limit)
        for entry in history:
            if key in entry:
                return int(entry["version"]), str(entry[key])
        if len(history) < limit:
            raise TraceNotFound(table.table_uri)
        limit *= 8


def load(where: Location, known: Snapshot | None = None) -> Snapshot:
    """The trace at its latest version; ``known`` itself while no commit followed
    it (two ``stat`` calls, where reading the log costs milliseconds), or else the
    snapshot this process loaded last, while no commit followed that: a run opens
    every trace of its pipeline, and most took nothing in since the last run."""
    for candidate in (known, _loaded.get(where)):
        if candidate is not None and _still_latest(where, candidate):
            _loaded.keep(where, candidate)
            return candidate
    with _opened.latest(where) as table:
        state = read_state(table)
        if not state.generation:  # created before traces had one: the table's id was it
            state = replace(state, generation=str(table.metadata().id))
        version = table.version()
        snapshot = Snapshot(
            version, state, files_by_batch(table, state.dims), stamp(where, version)
        )
    _loaded.keep(where, snapshot)
    return snapshot


def _still_latest(where: Location, snapshot: Snapshot) -> bool:
    return snapshot.stamp is not None and latest_at(where, snapshot.version, snapshot.stamp)


def forget(where: Location) -> None:
    """Let go of what this process loaded of a table being deleted."""
    _loaded.forget(where)


def stamp(where: Location, version: int) -> StoredObject | None:
    """The mark of ``version``'s commit as stored now (``open_tables.commit_stamp``)."""
    return commit_stamp(where, version)


def files_by_batch(table: DeltaTable, dims: int) -> dict[str, list[DataFile]]:
    actions = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    bounded = [KEY_HASH, *time_columns(dims)]
    files: dict[str, list[DataFile]] = defaultdict(list)
    for i, path in enumerate(actions.get("path", [])):
        records = int(actions["num_records"][i])
        mins = {c: actions[f"min.{c}"][i] for c in bounded if f"min.{c}" in actions}
        maxs = {c: actions[f"max.{c}"][i] for c in bounded if f"max.{c}" in actions}
        stats = make_stats(
            records,
            {c: int(v) for c, v in mins.items() if v is not None},
            {c: int(v) for c, v in maxs.items() if v is not None},
        )
        file = DataFile(path, int(actions["size_bytes"][i]), records, stats)
        files[batch_id_of_path(path)].append(file)
    for batch_files in files.values():
        batch_files.sort(key=lambda f: f.path)
    return dict(files)


def create(where: Location, state: TraceState, arrow_schema: object) -> None:
    """Create the trace's Delta table with its initial state (a no-op if it exists)."""
    DeltaTable.create(
        where.uri,
        arrow_schema,  # type: ignore[arg-type]
        mode="ignore",
        name=state.name,
        description="dd_etl trace",
        storage_options=where.delta_options,
        configuration=TABLE_CONFIGURATION,
        commit_properties=CommitProperties(
            custom_metadata={STATE_KEY: state.to_json(), OPERATION_KEY: "create"}
        ),
    )


def commit(where: Location, expected_version: int, change: Commit) -> int:
    with _opened.at(where, expected_version) as opened:
        return _commit(where, expected_version, change, opened)


def _commit(
    where: Location, expected_version: int, change: Commit, table: DeltaTable | None
) -> int:
    try:
        table = open_table(where, expected_version) if table is None else table
    except TraceNotFound:
        # ``clean_log`` removed that version: only after a newer state was committed.
        if open_table(where).version() > expected_version:
            raise StaleVersion(f"{where}: version {expected_version} left the log") from None
        raise
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = [
        AddAction(f.path, f.size, {}, now, True, f.stats) for f in change.add
    ]
    actions += [RemoveAction(f.path, True, now, f.size) for f in change.remove]
    txns = None
    if change.txn_version is not None:
        txns = [Transaction(app_id(change.state), change.txn_version)]
    properties = CommitProperties(
        custom_metadata={STATE_KEY: change.state.to_json(), OPERATION_KEY: change.operation},
        max_commit_retries=0,
        app_transactions=txns,
    )
    try:
        table.create_write_transaction(
            actions, "append", table.schema(), commit_properties=properties
        )
    except (DeltaError, OSError) as e:
        refused = isinstance(e, CommitFailedError)  # the version was taken: by whom?
        if not refused and where.is_local:
            raise
        # else a store's error (a timeout, a reset, a 5xx) after the commit was sent:
        # it may have landed, or the client's retry of it was refused as taken
        if _landed(where, expected_version + 1, change.state, e):
            return expected_version + 1
        if refused:
            raise
        raise StoreError(
            where.uri, f"failed a commit ({first_line(e)})", "nothing was committed; run again"
        ) from e
    return expected_version + 1


def _landed(where: Location, version: int, state: TraceState, error: Exception) -> bool:
    """Whether a commit of ``version`` whose answer was ``error`` landed, read back
    from the log: ours (True), another writer's (``StaleVersion``), or none (False).
    A store that cannot even be read leaves it to the next run."""
    try:
        latest = open_table(where).version()
        table = open_table(where, version) if latest >= version else None
    except Exception as e:
        raise StoreError(
            where.uri,
            f"failed a commit and then a read of it ({first_line(error)}; {first_line(e)})",
            "the commit may have landed: run again, and it continues from what the log holds",
        ) from error
    if table is None:
        return False
    recorded_at, text = latest_recorded(table, STATE_KEY)
    if recorded_at == version and text == state.to_json():
        return True  # the answer was lost on the way back
    raise StaleVersion(f"{where}: another commit took version {version}") from error


def unreferenced(where: Location, retention_hours: int) -> list[str]:
    """The files no snapshot of the last ``retention_hours`` can reach: removed from
    the log that long ago, or never in it and written that long ago.

    A file's age alone is not enough: a merge can remove a batch written days ago,
    and a reader that opened the table just before still reads it. Delta judges a
    removed file by when it was removed (the tombstone's timestamp). Nothing is
    deleted here and nothing is committed."""
    return open_table(where).vacuum(
        retention_hours=retention_hours,
        dry_run=True,
        enforce_retention_duration=False,
        full=True,
    )


_LOG_ENTRY = re.compile(r"(\d{20})\.(?:json|crc|checkpoint(?:\.\d+\.\d+)?\.parquet)")


def clean_log(where: Location, retention_hours: float) -> list[str]:
    """Delete the log entries older than both the latest checkpoint and the latest
    committed state, once ``retention_hours`` old; returns their paths.

    Opening a table lists its whole log directory, so a log that keeps every
    commit makes each open dearer as epochs accumulate. Nothing reads these
    entries: an open starts from the latest checkpoint and ``latest_state`` stops
    at the latest state. A writer that expected one of their versions is stale
    anyway, and ``commit`` tells it so. Oldest first, so a crash leaves a suffix.
    """
    log = where / "_delta_log"
    fs = where.filesystem
    try:
        with fs.open_input_stream((log / "_last_checkpoint").fs_path) as stream:
            checkpoint = int(json.loads(stream.read())["version"])
    except FileNotFoundError:
        return []
    keep_from = min(checkpoint, latest_state(open_table(where))[0])
    cutoff_ns = int((time.time() - retention_hours * 3600) * 1e9)
    removed = []
    entries = fs.get_file_info(pafs.FileSelector(log.fs_path, allow_not_found=True))
    for info in sorted(entries, key=lambda i: i.path):
        entry = _LOG_ENTRY.fullmatch(info.base_name)
        if entry and int(entry[1]) < keep_from and (info.mtime_ns or 0) <= cutoff_ns:
            with contextlib.suppress(FileNotFoundError):
                fs.delete_file(info.path)
            removed.append(f"_delta_log/{info.base_name}")
    return removed
