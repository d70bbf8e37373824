"""The driver's sink commits (``sinks/delta_commit.py``) on delta-rs tables, no Spark:
which tables it writes, a commit with change files as delta-rs reads it, and two
writers of one version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from dd_etl.lake import Location
from dd_etl.sinks import delta_commit
from dd_etl.sinks.delta_commit import Actions, StoredFile

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def table(root: Path, **configuration: str) -> DeltaTable:
    return DeltaTable.create(str(root), SCHEMA, configuration=configuration or None)


def stored(root: Path, name: str, rows: pa.Table) -> StoredFile:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, root / name)
    return StoredFile(name, (root / name).stat().st_size, rows.num_rows)


@pytest.mark.parametrize(
    ("settings", "writable"),
    [
        ({}, True),
        ({"delta.enableChangeDataFeed": "true"}, True),
        ({"delta.appendOnly": "true"}, False),
        ({"delta.enableDeletionVectors": "true"}, False),
    ],
)
def test_tables_whose_rules_it_keeps_are_writable(
    tmp_path: Path, settings: dict[str, str], writable: bool
) -> None:
    assert delta_commit.writable(table(tmp_path, **settings)) == writable


def test_a_commits_change_files_are_its_change_feed(tmp_path: Path) -> None:
    """A commit that replaces every row has change files of what changed: delta-rs's
    feed reader reads those, not every row deleted and inserted again."""
    opened = table(tmp_path, **{"delta.enableChangeDataFeed": "true"})
    first = stored(tmp_path, "a/part-0.parquet", pa.table({"k": [1, 2], "v": ["x", "y"]}, SCHEMA))
    where = Location.of(tmp_path)
    assert delta_commit.commit(where, opened, Actions([first], [], [], False), ("app", 0), {})
    second = stored(tmp_path, "b/part-0.parquet", pa.table({"k": [1, 2], "v": ["x", "z"]}, SCHEMA))
    changes = pa.table({"k": [2, 2], "v": ["y", "z"], "_change_type": ["delete", "insert"]})
    change = stored(tmp_path, "_change_data/b/part-0.parquet", changes)
    replace = Actions([second], [first], [change], True)
    assert delta_commit.commit(where, opened, replace, ("app", 1), {"dd_etl.epoch": "1"})
    assert opened.transaction_version("app") == 1
    feed = [
        r
        for b in opened.load_cdf(starting_version=2, ending_version=2)
        for r in pa.table(b).to_pylist()
    ]
    assert sorted((r["k"], r["v"], r["_change_type"]) for r in feed) == [
        (2, "y", "delete"),
        (2, "z", "insert"),
    ]
    assert sorted(opened.to_pyarrow_table().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "v": "x"},
        {"k": 2, "v": "z"},
    ]
    assert opened.history(1)[0]["dd_etl.epoch"] == "1"


def test_of_two_writers_of_one_version_one_wins(tmp_path: Path) -> None:
    opened = table(tmp_path)
    other = DeltaTable(str(tmp_path))
    rows = stored(tmp_path, "a/part-0.parquet", pa.table({"k": [1], "v": ["x"]}, SCHEMA))
    where = Location.of(tmp_path)
    assert delta_commit.commit(where, opened, Actions([rows], [], [], False), ("one", 0), {})
    assert not delta_commit.commit(where, other, Actions([rows], [], [], False), ("two", 0), {})
    other.update_incremental()
    assert other.version() == 1 and other.transaction_version("two") is None
