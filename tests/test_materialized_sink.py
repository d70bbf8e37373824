"""``materialize:`` tables of views too large to rewrite: each epoch applies the view's
changes by Spark (an append, or one MERGE with deletion vectors), so what it writes
follows the change. After every epoch the table equals plain Spark SQL over the
source, duplicates and NULLs included; each epoch is one commit, found again by time
travel; a table rewritten whole has a change feed of exactly the view's changes;
a table a small view started with delta-rs is handed to Spark; a process
killed right after Spark's commit does not apply the epoch twice. A table the
pipeline did not create, or one another writer changed, is refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.pipeline.build import open_pipeline
from dd_etl.sinks import spark_commit
from dd_etl.sinks.delta_table import SinkLog, committed_epoch
from tests.support.delta_pipelines import delta_pipeline
from tests.support.trace_rows import changes_between, delta_rs_feed

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent

VIEWS = {
    # a set whose rows change in place: retractions, so a MERGE (by its key, NULL among them)
    "by_customer": "SELECT cid, COUNT(*) AS orders, SUM(amount) AS total FROM orders GROUP BY cid",
    # a bag: equal rows many times over, NULLs among them
    "amounts": "SELECT cid, amount FROM orders",
}
BY_SPARK = {"small_records": 0}
"""Every run's work, and its sinks', made by Spark's executors."""
TAKE_CHANGES = {**BY_SPARK, "rewrite_records": 0}
"""Every view's table takes its changes, as a view too large to rewrite."""


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (args, result.stdout, result.stderr)
    return result.stdout + result.stderr


def pipeline_file(root: Path, sizing: dict[str, int] | None = None) -> Path:
    """The pipeline (written again with other ``sizing:`` settings, if given)."""
    return delta_pipeline(root, "sinks", {"orders": "id"}, VIEWS, materialize=True, sizing=sizing)


def load(spark: SparkSession, root: Path, rows: int = 3000) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{root / 'orders'}` (id BIGINT, cid BIGINT, amount BIGINT) "
        "USING delta TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    values = ", ".join(
        f"({i}, {'NULL' if i % 17 == 0 else i % 500}, {'NULL' if i % 13 == 0 else (i * 3) % 5})"
        for i in range(rows)
    )
    spark.sql(f"INSERT INTO delta.`{root / 'orders'}` VALUES {values}")


def change(spark: SparkSession, root: Path, epoch: int) -> None:
    """Epoch 1 only inserts (``amounts`` then appends); later ones also update
    and delete."""
    orders = f"delta.`{root / 'orders'}`"
    first = 1000 * epoch
    new = ", ".join(f"({i}, {i % 9}, {i % 4})" for i in range(first, first + 5))
    spark.sql(f"INSERT INTO {orders} VALUES {new}")
    if epoch > 1:
        spark.sql(f"UPDATE {orders} SET amount = amount + 1 WHERE id % 97 = {epoch}")
        spark.sql(f"DELETE FROM {orders} WHERE id % 89 = {epoch}")


def rows(df: Any) -> Counter[str]:
    return Counter(json.dumps(r.asDict(), sort_keys=True) for r in df.collect())


def expected(spark: SparkSession, root: Path, view: str) -> Counter[str]:
    sql = VIEWS[view].replace("FROM orders", f"FROM delta.`{root / 'orders'}`")
    return rows(spark.sql(sql))


def epoch_versions(table: Path) -> dict[int, tuple[int, str]]:
    """The Delta version and operation that hold each epoch, from the commits' own
    record of it (read by delta-rs, whichever writer committed)."""
    out: dict[int, tuple[int, str]] = {}
    for info in DeltaTable(str(table)).history():
        epoch = committed_epoch(info)
        if epoch is not None:
            assert epoch not in out, f"epoch {epoch} committed twice"
            out[epoch] = (info["version"], info["operation"])
    return out


def applied(before: Counter[str], after: Counter[str]) -> tuple[int, int]:
    """Rows a commit taking ``before`` to ``after`` adds and removes: a row that lost
    copies has all of them removed and its new count added (copies of a row are
    not told apart); one that gained copies has only those added."""
    rows = set(before) | set(after)
    lost = [r for r in rows if after[r] < before[r]]
    gained = sum(after[r] - before[r] for r in rows if after[r] > before[r])
    return gained + sum(after[r] for r in lost), sum(before[r] for r in lost)


def deletion_vectors(table: Path) -> int:
    return sum(
        1
        for f in (table / "_delta_log").glob("*.json")
        for line in f.read_text().splitlines()
        if '"deletionVector":{' in line
    )


def test_large_views_sink_their_changes(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spark_commit, "NAMED_FROM_ROWS", -1)  # values named at any size
    pipeline = pipeline_file(tmp_path, TAKE_CHANGES)
    load(spark, tmp_path)
    opened = open_pipeline(pipeline, spark)
    keys = {v: getattr(opened.materialized(v), "key", "no sink") for v in VIEWS}
    assert keys == {"by_customer": ("cid",), "amounts": None}  # the GROUP BY's, through renames
    history: dict[int, dict[str, Counter[str]]] = {}
    for epoch in range(3):
        if epoch:
            change(spark, tmp_path, epoch)
        cli("run", str(pipeline))
        history[epoch] = {v: expected(spark, tmp_path, v) for v in VIEWS}
        status = json.loads(cli("status", str(pipeline), "--json"))
        for view in VIEWS:
            table = tmp_path / "out" / view
            got = rows(spark.read.format("delta").load(str(table)))
            assert got == history[epoch][view], (view, epoch)
            written = next(v for v in status["views"] if v["name"] == view)["sink_writes"]
            write = written["materialize"]
            assert write["epoch"] == epoch
            before = history[epoch - 1][view] if epoch else Counter[str]()
            added, removed = applied(before, history[epoch][view])
            assert (write["rows_added"], write["rows_removed"]) == (added, removed), view
            if epoch:  # what the epoch changed, not the view
                assert added + removed < sum(history[epoch][view].values()) / 2, view
        profile = status["last_run"]["profile"]
        assert set(profile["sinks"]) == {f"{v} (materialized)" for v in VIEWS}

    # epoch 1 only added orders: amounts appended; the others merged
    amounts = epoch_versions(tmp_path / "out" / "amounts")
    assert [amounts[e][1] for e in range(3)] == ["WRITE", "WRITE", "MERGE"]
    for view in VIEWS:
        table = tmp_path / "out" / view
        assert deletion_vectors(table) > 0, view  # retractions marked, files kept
        versions = epoch_versions(table)
        assert sorted(versions) == [0, 1, 2]
        for epoch, (version, _) in versions.items():  # time travel, epoch by epoch
            old = spark.read.format("delta").option("versionAsOf", version).load(str(table))
            assert rows(old) == history[epoch][view], (view, epoch)

    # a run with nothing new records the epoch, and a repeat adds nothing
    cli("run", str(pipeline))
    assert sorted(epoch_versions(tmp_path / "out" / "by_customer")) == [0, 1, 2, 3]
    assert "ok" in cli("verify", str(pipeline))

    # a rebuilt view's trace starts over: its table takes the difference between
    # the view and itself (a MERGE, not a rewrite), then follows the new trace's
    # changes (bounded by their range alone, as an epoch retracting more than
    # NAMED_KEYS rows is)
    cli("rebuild", str(pipeline), "by_customer")
    monkeypatch.setattr(spark_commit, "NAMED_KEYS", 0)
    for epoch in (4, 5):
        change(spark, tmp_path, epoch)
        cli("run", str(pipeline))
        table = tmp_path / "out" / "by_customer"
        got = rows(spark.read.format("delta").load(str(table)))
        assert got == expected(spark, tmp_path, "by_customer"), epoch
        views = json.loads(cli("status", str(pipeline), "--json"))["views"]
        write = next(v for v in views if v["name"] == "by_customer")["sink_writes"]["materialize"]
        assert (write["replaced"], write["operation"]) == (False, "MERGE"), epoch


def test_a_range_counts_the_rows_of_the_files_it_overlaps(tmp_path: Path) -> None:
    """What decides whether a MERGE names its retracted values: the rows of the files
    whose statistics overlap their range, read from the log."""
    uri = str(tmp_path / "t")
    for ids in (range(0, 10), range(100, 120)):
        write_deltalake(uri, pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
    log = SinkLog(DeltaTable(uri), "app")
    assert log.rows_overlapping("id", 5, 7) == 10
    assert log.rows_overlapping("id", 9, 100) == 30
    assert log.rows_overlapping("id", 11, 99) == 0


def change_feed(spark: SparkSession, table: Path, version: int) -> Counter[tuple[str, int]]:
    """A version's change feed as rows and signs (+1 inserted, -1 deleted), by
    Spark's reader; delta-rs's reads the same."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .option("endingVersion", version)
        .load(str(table))
    )
    got: Counter[tuple[str, int]] = Counter()
    for r in feed.collect():
        row = {k: v for k, v in r.asDict().items() if not k.startswith("_")}
        sign = 1 if r["_change_type"] == "insert" else -1
        got[json.dumps(row, sort_keys=True, default=str), sign] += 1
    assert delta_rs_feed(table, version) == got
    return got


def test_a_small_views_table_is_handed_to_spark(spark: SparkSession, tmp_path: Path) -> None:
    """Driver-rewritten while small, rewritten by Spark's files when larger (the
    driver commits both), then taking its changes: Spark's from then on, also when
    the view is small again. An epoch rewritten whole has change files of exactly
    the view's changes (copies of a row counted), not every row deleted and
    inserted again, read alike by Spark and delta-rs; after a rebuild, the
    difference from what the table held."""
    pipeline = pipeline_file(tmp_path)
    load(spark, tmp_path, rows=400)
    table = tmp_path / "out" / "amounts"
    held = {v: Counter[str]() for v in VIEWS}

    def last_write() -> dict[str, Any]:
        views = json.loads(cli("status", str(pipeline), "--json"))["views"]
        write: dict[str, Any] = next(v for v in views if v["name"] == "amounts")["sink_writes"]
        return write["materialize"]

    def rewritten(epoch: int) -> None:
        if epoch:
            change(spark, tmp_path, epoch)
        cli("run", str(pipeline))
        for view in VIEWS:
            out, now = tmp_path / "out" / view, expected(spark, tmp_path, view)
            assert rows(spark.read.format("delta").load(str(out))) == now, (view, epoch)
            changed = changes_between(held[view], now)
            assert change_feed(spark, out, epoch_versions(out)[epoch][0]) == changed, (view, epoch)
            assert not epoch or 0 < sum(changed.values()) < len(now) / 4  # a few rows
            held[view] = now

    rewritten(0)  # small: rewritten by the driver
    rewritten(1)
    cli("rebuild", str(pipeline), "by_customer")
    pipeline_file(tmp_path, BY_SPARK)
    rewritten(2)  # larger, not past rewrite_records: rewritten by Spark
    assert last_write()["replaced"] and deletion_vectors(table) == 0
    assert len(list((table / "_change_data").rglob("*.parquet"))) == 2  # epochs 1 and 2
    pipeline_file(tmp_path, TAKE_CHANGES)
    for epoch in (3, 4):
        change(spark, tmp_path, epoch)
        cli("run", str(pipeline))
        assert not last_write()["replaced"]
    pipeline_file(tmp_path)  # small again: Spark keeps the table it wrote deletion vectors to
    change(spark, tmp_path, 5)
    cli("run", str(pipeline))
    assert last_write()["replaced"]
    cli("run", str(pipeline))  # nothing new: the epoch recorded, no row written
    write = last_write()
    assert (write["replaced"], write["rows_added"]) == (False, 0)
    for view in VIEWS:
        got = rows(spark.read.format("delta").load(str(tmp_path / "out" / view)))
        assert got == expected(spark, tmp_path, view), view
    versions = epoch_versions(table)
    assert sorted(versions) == [0, 1, 2, 3, 4, 5, 6]
    assert [versions[e][1] for e in range(5)] == ["WRITE", "WRITE", "WRITE", "MERGE", "MERGE"]
    assert deletion_vectors(table) > 0


@pytest.mark.slow
def test_a_run_killed_after_sparks_commit_does_not_apply_it_twice(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The killed run in a process of its own; the runs before and after it here."""
    pipeline = pipeline_file(tmp_path, TAKE_CHANGES)
    load(spark, tmp_path)
    cli("run", str(pipeline))
    change(spark, tmp_path, 2)
    command = [sys.executable, "-m", "dd_etl.cli"]
    # killed when by_customer's epoch 1 is in, and the tick is not
    failpoint = "sink.spark_committed=1"
    env = {**os.environ, "DD_ETL_SPARK_MASTER": "local[1]", "DD_ETL_FAILPOINTS": failpoint}
    killed = subprocess.run(
        [*command, "run", str(pipeline)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "completed interrupted epoch 1" in cli("run", str(pipeline))
    for view in VIEWS:
        table = tmp_path / "out" / view
        assert rows(spark.read.format("delta").load(str(table))) == expected(spark, tmp_path, view)
        assert sorted(epoch_versions(table)) == [0, 1], view


def test_a_sink_table_dd_etl_does_not_own_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    pipeline = pipeline_file(tmp_path)
    load(spark, tmp_path, rows=50)
    table = tmp_path / "out" / "amounts"
    spark.sql(f"CREATE TABLE delta.`{table}` (x STRING) USING delta")
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == 3, result.stderr
    said = " ".join(result.stderr.split())
    assert "'amounts'" in said and "did not create" in said and str(table) in said
    status = json.loads(cli("status", str(pipeline), "--json"))
    assert [s["upper"] for s in status["sources"]] == [None]  # nothing taken in

    shutil.rmtree(table)
    cli("run", str(pipeline))
    spark.sql(f"INSERT INTO delta.`{table}` VALUES (1, 2)")  # another writer
    spark.sql(f"OPTIMIZE delta.`{table}`")  # maintenance is fine
    change(spark, tmp_path, 1)
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == 3, result.stderr
    said = " ".join(result.stderr.split())
    assert "written by another writer" in said and "WRITE" in said
    shutil.rmtree(table)  # as the message says: the next run writes it whole
    cli("run", str(pipeline))
    for view in VIEWS:
        got = rows(spark.read.format("delta").load(str(tmp_path / "out" / view)))
        assert got == expected(spark, tmp_path, view), view
