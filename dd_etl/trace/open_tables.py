"""Delta tables kept open between reads of the same trace's log, and the
snapshots last read from them.

A run reads each trace's log many times (before and after each of its appends),
and opening a Delta table replays its log from the latest checkpoint. A table
opened before is brought up to date instead, reading only the commits made
since (``update_incremental``), and a commit at the version it is at needs no
open at all.

A kept table is reused only while the commit file of the version it was last
brought to is still the file it was then (same size and modification time): a
trace dropped and created again, or whose log was cleaned past that version, is
opened afresh. Each is used by one thread at a time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from deltalake import DeltaTable

from dd_etl.lake import Location, objects
from dd_etl.lake.objects import StoredObject
from dd_etl.trace.storage import Snapshot

KEPT_TABLES = 256
"""Tables kept open at most; the least recently used is let go."""
KEPT_SNAPSHOTS = 8192
"""Snapshots kept at most (a few kilobytes each): every trace of a pipeline of
hundreds of views."""


@dataclass
class _Kept:
    table: DeltaTable
    version: int  # the version whose commit file ``stamp`` describes
    stamp: StoredObject  # that file as its store showed it


class OpenTables:
    def __init__(self, open_table: Callable[[Location], DeltaTable]) -> None:
        self._open = open_table
        self._kept: OrderedDict[Location, _Kept] = OrderedDict()
        self._locks: dict[Location, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def latest(self, where: Location) -> Iterator[DeltaTable]:
        """The table at its latest version, for the block's use only."""
        with self._lock(where):
            kept = self._reused(where)
            if kept is not None:
                try:
                    kept.table.update_incremental()
                except Exception:  # any doubt: open it afresh
                    kept = None
            table = kept.table if kept is not None else self._open(where)
            self._keep(where, table)
            yield table

    @contextmanager
    def at(self, where: Location, version: int) -> Iterator[DeltaTable | None]:
        """The kept table brought to ``version`` (None if it cannot be), for the
        block's use only: a commit on it moves the log on, and the next use brings
        the table along, reading only the commits since (a table does not follow its
        own commits)."""
        with self._lock(where):
            kept = self._reused(where)
            if kept is not None and kept.table.version() < version:
                try:
                    kept.table.load_as_version(version)
                    self._keep(where, kept.table)
                except Exception:  # any doubt: the caller opens it afresh
                    kept = None
            yield kept.table if kept is not None and kept.table.version() == version else None

    def _lock(self, where: Location) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(where, threading.Lock())

    def _reused(self, where: Location) -> _Kept | None:
        with self._guard:
            kept = self._kept.get(where)
        if kept is None or commit_stamp(where, kept.version) != kept.stamp:
            return None
        return kept

    def _keep(self, where: Location, table: DeltaTable) -> None:
        version = table.version()
        stamp = commit_stamp(where, version)
        with self._guard:
            if stamp is None:
                self._kept.pop(where, None)
                return
            self._kept[where] = _Kept(table, version, stamp)
            self._kept.move_to_end(where)
            while len(self._kept) > KEPT_TABLES:
                self._kept.popitem(last=False)


class LoadedSnapshots:
    """The snapshot this process loaded last of each table: the caller
    checks that no commit followed it (``latest_at``) before using it."""

    def __init__(self) -> None:
        self._kept: OrderedDict[Location, Snapshot] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, where: Location) -> Snapshot | None:
        with self._guard:
            return self._kept.get(where)

    def keep(self, where: Location, snapshot: Snapshot) -> None:
        with self._guard:
            self._kept[where] = snapshot
            self._kept.move_to_end(where)
            while len(self._kept) > KEPT_SNAPSHOTS:
                self._kept.popitem(last=False)

    def forget(self, where: Location) -> None:
        with self._guard:
            self._kept.pop(where, None)


def commit_stamp(where: Location, version: int) -> StoredObject | None:
    """The commit file of ``version`` as its store shows it (size, and ETag or
    modification time): one HEAD; None without that file."""
    return objects.stat(_commit_file(where, version))


def latest_at(where: Location, version: int, stamp: object) -> bool:
    """Whether the table's latest version is still ``version`` as ``stamp`` saw its
    commit: that file unchanged (not a table dropped and made again) and no commit
    after it. Commit files are created whole, never rewritten in place."""
    return objects.stat(_commit_file(where, version + 1)) is None and (
        commit_stamp(where, version) == stamp
    )


def _commit_file(where: Location, version: int) -> Location:
    return where / f"_delta_log/{version:020d}.json"
