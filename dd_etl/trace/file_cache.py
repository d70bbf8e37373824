"""Batch files the driver read or wrote, kept decoded for the next read.

A batch file never changes: its directory is named after the batch, or the
merge step attempt, that wrote it, and nothing writes to it again. A copy
decoded once is therefore the file for as long as any reader can reach it, and
no entry ever needs invalidating. Small intervals read the same files epoch
after epoch: the history lookups of a large arrangement touch most of its
files whichever keys change (1,400 changed trips read half a million stored
rows of the benchmark's MIN/MAX level), and a batch the driver just wrote is
read back right away, by its own trace and by the lookups of its readers.

The cache is the process's, bounded by the bytes it holds; the least recently
used files go first.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from dd_etl.lake import Location
from dd_etl.profiling import count_bytes


def _cached_bytes() -> int:
    """An eighth of the machine's memory, between 512 MiB and 4 GiB: a cache smaller
    than the files an epoch's lookups read keeps nothing for the next epoch (each
    file is dropped before it is read again), so the budget follows the memory
    there is rather than a constant."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = 0
    return min(max(memory // 8, 512 << 20), 4 << 30)


CACHED_BYTES = _cached_bytes()
"""Decoded files kept at most, in Arrow bytes."""


class FileCache:
    def __init__(self, budget: int = CACHED_BYTES, largest: int | None = None) -> None:
        self.budget = budget
        self.largest = budget // 4 if largest is None else largest
        """A file larger than this is not kept: it would push out most others."""
        self._tables: OrderedDict[str, pa.Table] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def read(self, file: Location, columns: Sequence[str], keep: bool = True) -> pa.Table:
        """The file's ``columns``: kept ones if it was read or written before with
        them, else read now, and kept unless ``keep`` is false (a read of a few
        columns would replace a kept copy of them all)."""
        key = file.uri
        with self._lock:
            kept = self._tables.get(key)
            if kept is not None and all(c in kept.column_names for c in columns):
                self._tables.move_to_end(key)
                return kept.select(list(columns))
        with file.filesystem.open_input_file(file.fs_path) as stream:
            table = pq.read_table(stream, columns=list(columns))
            count_bytes(read=stream.size())
        if keep:
            self.keep(file, table)
        return table

    def keep(self, file: Location, table: pa.Table) -> None:
        """Remember ``table`` as the contents of ``file`` (which holds them, or is
        about to)."""
        key = file.uri
        size = table.nbytes
        if size > self.largest:
            return
        with self._lock:
            old = self._tables.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._tables[key] = table
            self._bytes += size
            while self._bytes > self.budget:
                _, dropped = self._tables.popitem(last=False)
                self._bytes -= dropped.nbytes


files = FileCache()
"""The process's cache of batch files."""
