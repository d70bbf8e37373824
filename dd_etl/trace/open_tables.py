"""Delta tables kept open between reads of the same trace's log.

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

KEPT_TABLES = 256
"""Tables kept open at most; the least recently used is let go."""


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
        """The kept table if it is at ``version`` (None otherwise), for the block's
        use only: a commit on it moves it on, and the next use updates it."""
        with self._lock(uri):
            kept = self._reused(uri)
            yield kept.table if kept is not None and kept.table.version() == version else None

    def _lock(self, uri: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(uri, threading.Lock())

    def _reused(self, uri: str) -> _Kept | None:
        with self._guard:
            kept = self._kept.get(uri)
        if kept is None or _stamp(uri, kept.version) != kept.stamp:
            return None
        return kept

    def _keep(self, uri: str, table: DeltaTable) -> None:
        version = table.version()
        stamp = _stamp(uri, version)
        with self._guard:
            if stamp is None:
                self._kept.pop(uri, None)
                return
            self._kept[uri] = _Kept(table, version, stamp)
            self._kept.move_to_end(uri)
            while len(self._kept) > KEPT_TABLES:
                self._kept.popitem(last=False)


def _stamp(uri: str, version: int) -> tuple[int, int] | None:
    """The size and modification time of the commit file of ``version``; None for a
    table not on the local file system, or without that file."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    root = Path(uri.removeprefix("file://"))
    try:
        stat = os.stat(root / "_delta_log" / f"{version:020d}.json")
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns
