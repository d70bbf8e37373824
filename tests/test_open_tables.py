"""Delta tables kept open between reads: brought up to date by the commits made
since, and never reused once their log is not the log they were opened on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from dd_etl.lake import Location
from dd_etl.trace.open_tables import OpenTables, commit_stamp, latest_at


def _rows(*values: int) -> pa.Table:
    return pa.table({"v": pa.array(values, pa.int64())})


def _opener(opened: list[Location]) -> OpenTables:
    def open_table(where: Location) -> DeltaTable:
        opened.append(where)
        return DeltaTable(where.uri)

    return OpenTables(open_table)


def _values(table: DeltaTable) -> list[int]:
    return sorted(table.to_pyarrow_table().column("v").to_pylist())


def test_a_kept_table_sees_commits_made_elsewhere_without_opening_again(tmp_path: Path) -> None:
    uri = Location.of(tmp_path / "t")
    write_deltalake(uri.uri, _rows(1))
    opened: list[Location] = []
    tables = _opener(opened)
    with tables.latest(uri) as first:
        assert _values(first) == [1]
    write_deltalake(uri.uri, _rows(2), mode="append")  # another writer
    with tables.latest(uri) as second:
        assert second is first
        assert second.version() == 1
        assert _values(second) == [1, 2]
    assert opened == [uri]


def test_a_commit_uses_the_kept_table_only_at_its_version(tmp_path: Path) -> None:
    uri = Location.of(tmp_path / "t")
    write_deltalake(uri.uri, _rows(1))
    opened: list[Location] = []
    tables = _opener(opened)
    with tables.latest(uri) as table:
        pass
    with tables.at(uri, 1) as other:
        assert other is None  # not at that version: the caller opens it there
    with tables.at(uri, 0) as kept:
        assert kept is table
        write_deltalake(kept, _rows(2), mode="append")  # the commit, on the kept table
    with tables.latest(uri) as after:
        assert after is table
        assert after.version() == 1
        assert _values(after) == [1, 2]
    assert opened == [uri]


def test_a_commit_after_others_brings_the_kept_table_along_without_opening_it(
    tmp_path: Path,
) -> None:
    uri = Location.of(tmp_path / "t")
    write_deltalake(uri.uri, _rows(1))
    opened: list[Location] = []
    tables = _opener(opened)
    with tables.latest(uri) as table:
        pass
    write_deltalake(uri.uri, _rows(2), mode="append")  # a commit the kept table did not follow
    with tables.at(uri, 1) as kept:
        assert kept is table
        assert kept.version() == 1
        assert _values(kept) == [1, 2]
    assert opened == [uri]


def test_the_latest_version_is_told_by_its_commit_file(tmp_path: Path) -> None:
    uri = Location.of(tmp_path / "t")
    write_deltalake(uri.uri, _rows(1))
    stamp = commit_stamp(uri, 0)
    assert stamp is not None
    assert latest_at(uri, 0, stamp)
    write_deltalake(uri.uri, _rows(2), mode="append")
    assert not latest_at(uri, 0, stamp)  # a commit followed
    shutil.rmtree(uri.path)  # dropped and created again at the same version
    write_deltalake(uri.uri, _rows(3, 4))
    assert not latest_at(uri, 0, stamp)


def test_a_table_created_again_is_opened_afresh(tmp_path: Path) -> None:
    uri = Location.of(tmp_path / "t")
    write_deltalake(uri.uri, _rows(1))
    write_deltalake(uri.uri, _rows(2), mode="append")
    opened: list[Location] = []
    tables = _opener(opened)
    with tables.latest(uri):
        pass
    shutil.rmtree(uri.path)  # dropped and created again, now one commit behind
    write_deltalake(uri.uri, _rows(7))
    write_deltalake(uri.uri, _rows(8), mode="append")
    with tables.latest(uri) as table:
        assert _values(table) == [7, 8]
    assert opened == [uri, uri]
