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
opened afresh. Only tables on the local file system are kept (the check is a
``stat``), each used by one thread at a time.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deltalake import DeltaTable

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
    stamp: tuple[int, int]  # that file's size and modification time


class OpenTables:
    def __init__(self, open_table: Callable[[str], DeltaTable]) -> None:
        self._open = open_table
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def latest(self, uri: str) -> Iterator[DeltaTable]:
        """The table at its latest version, for the block's use only."""
        with self._lock(uri):
            kept = self._reused(uri)
            if kept is not None:
                try:
                    kept.table.update_incremental()
                except Exception:  # any doubt: open it afresh
                    kept = None
            table = kept.table if kept is not None else self._open(uri)
            self._keep(uri, table)
            yield table

    @contextmanager
    def at(self, uri: str, version: int) -> Iterator[DeltaTable | None]:
        """The kept table brought to ``version`` (None if it cannot be), for the
        block's use only: a commit on it moves the log on, and the next use brings
        the table along, reading only the commits since (a table does not follow its
        own commits)."""
        with self._lock(uri):
            kept = self._reused(uri)
            if kept is not None and kept.table.version() < version:
                try:
                    kept.table.load_as_version(version)
                    self._keep(uri, kept.table)
                except Exception:  # any doubt: the caller opens it afresh
                    kept = None
            yield kept.table if kept is not None and kept.table.version() == version else None

    def _lock(self, uri: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(uri, threading.Lock())

    def _reused(self, uri: str) -> _Kept | None:
        with self._guard:
            kept = self._kept.get(uri)
        if kept is None or commit_stamp(uri, kept.version) != kept.stamp:
            return None
        return kept

    def _keep(self, uri: str, table: DeltaTable) -> None:
        version = table.version()
        stamp = commit_stamp(uri, version)
        with self._guard:
            if stamp is None:
                self._kept.pop(uri, None)
                return
            self._kept[uri] = _Kept(table, version, stamp)
            self._kept.move_to_end(uri)
            while len(self._kept) > KEPT_TABLES:
                self._kept.popitem(last=False)


class LoadedSnapshots:
    """The snapshot this process loaded last of each table, by uri: the caller
    checks that no commit followed it (``latest_at``) before using it."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, Snapshot] = OrderedDict()
        self._guard = threading.Lock()

    def get(self, uri: str) -> Snapshot | None:
        with self._guard:
            return self._kept.get(uri)

    def keep(self, uri: str, snapshot: Snapshot) -> None:
        with self._guard:
            self._kept[uri] = snapshot
            self._kept.move_to_end(uri)
            while len(self._kept) > KEPT_SNAPSHOTS:
                self._kept.popitem(last=False)

    def forget(self, uri: str) -> None:
        with self._guard:
            self._kept.pop(uri, None)


def commit_stamp(uri: str, version: int) -> tuple[int, int] | None:
    """The size and modification time of the commit file of ``version``; None for a
    table not on the local file system, or without that file."""
    path = _commit_file(uri, version)
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def latest_at(uri: str, version: int, stamp: object) -> bool:
    """Whether the table's latest version is still ``version`` as ``stamp`` saw its
    commit: that file unchanged (not a table dropped and made again) and no commit
    after it. Commit files are created whole, never rewritten in place."""
    following = _commit_file(uri, version + 1)
    return (
        following is not None
        and commit_stamp(uri, version) == stamp
        and not os.path.exists(following)
    )


def _commit_file(uri: str, version: int) -> Path | None:
    """Where the commit of ``version`` is kept, for a table on the local file system."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    return Path(uri.removeprefix("file://")) / "_delta_log" / f"{version:020d}.json"
