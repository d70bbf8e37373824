"""Batch files kept decoded in the driver: read once, then served from memory
within a budget of bytes, least recently used first out."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dd_etl.lake import Location
from dd_etl.trace.file_cache import FileCache


def _file(path: Path, *values: int) -> pa.Table:
    table = pa.table({"k": pa.array(values, pa.int64()), "v": pa.array(values, pa.float64())})
    pq.write_table(table, path)
    return table


def test_a_file_read_once_is_served_from_memory(tmp_path: Path) -> None:
    cache = FileCache()
    path = tmp_path / "a.parquet"
    table = _file(path, 1, 2, 3)
    assert cache.read(Location.of(path), ["k", "v"]).equals(table)
    path.unlink()  # a batch file never changes: the copy is the file
    assert cache.read(Location.of(path), ["k", "v"]).equals(table)
    assert cache.read(Location.of(path), ["v"]).equals(table.select(["v"]))


def test_a_read_of_columns_not_kept_reads_the_file(tmp_path: Path) -> None:
    cache = FileCache()
    path = tmp_path / "a.parquet"
    table = _file(path, 1, 2)
    cache.read(Location.of(path), ["k"])
    assert cache.read(Location.of(path), ["k", "v"]).equals(table)
    path.unlink()
    assert cache.read(Location.of(path), ["k", "v"]).equals(table)  # the wider read is kept now


def test_a_written_file_is_kept_without_reading_it(tmp_path: Path) -> None:
    cache = FileCache()
    path = tmp_path / "never-written.parquet"
    table = pa.table({"k": pa.array([7], pa.int64())})
    cache.keep(Location.of(path), table)
    assert cache.read(Location.of(path), ["k"]).equals(table)


def test_the_least_recently_used_files_go_first(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.parquet" for i in range(3)]
    tables = [_file(p, *range(i * 100, i * 100 + 100)) for i, p in enumerate(paths)]
    size = pq.read_table(paths[0]).nbytes
    cache = FileCache(budget=size * 5 // 2, largest=size)  # room for two
    cache.read(Location.of(paths[0]), ["k", "v"])
    cache.read(Location.of(paths[1]), ["k", "v"])
    cache.read(Location.of(paths[0]), ["k", "v"])  # used again: now the newest
    cache.read(Location.of(paths[2]), ["k", "v"])  # pushes out the oldest, the second file
    for p in paths:
        p.unlink()
    assert cache.read(Location.of(paths[0]), ["k", "v"]).equals(tables[0])
    assert cache.read(Location.of(paths[2]), ["k", "v"]).equals(tables[2])
    with pytest.raises(FileNotFoundError):
        cache.read(Location.of(paths[1]), ["k", "v"])
