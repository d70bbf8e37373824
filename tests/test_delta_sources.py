"""Delta tables as Spark users have them: written by delta-spark with deletion vectors
and column mapping, their change feed on or off. Every view equals plain Spark SQL
over the same tables after every epoch; a renamed column stops the run, naming it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from tests.support.delta_pipelines import delta_pipeline

pytestmark = pytest.mark.spark

VIEWS = {
    "by_customer": "SELECT c.name, COUNT(*) AS orders, SUM(o.amount) AS total "
    "FROM orders o JOIN customers c ON o.cid = c.cid GROUP BY c.name",
    "large": "SELECT id, amount FROM orders WHERE amount > 40",
}


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return result.stdout + result.stderr


def pipeline_file(root: Path) -> Path:
    sources = {"orders": "id", "customers": "cid"}
    return delta_pipeline(root, "users_delta", sources, VIEWS, materialize=False)


def create_tables(spark: SparkSession, root: Path) -> None:
    """``orders``: deletion vectors and change feed on; ``customers``: deletion vectors
    and column mapping by name, no change feed (taken in by differencing)."""
    spark.sql(
        f"CREATE TABLE delta.`{root / 'orders'}` (id BIGINT, cid BIGINT, amount BIGINT) "
        "USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(
        f"CREATE TABLE delta.`{root / 'customers'}` (cid BIGINT, name STRING, region STRING) "
        "USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
        "'delta.columnMapping.mode' = 'name')"
    )
    orders = ", ".join(f"({i}, {i % 6}, {(i * 7) % 50})" for i in range(200))
    spark.sql(f"INSERT INTO delta.`{root / 'orders'}` VALUES {orders}")
    customers = ", ".join(f"({c}, 'c{c}', 'r{c % 2}')" for c in range(6))
    spark.sql(f"INSERT INTO delta.`{root / 'customers'}` VALUES {customers}")


def change_tables(spark: SparkSession, root: Path, epoch: int) -> None:
    """DELETE, UPDATE and MERGE, each written as deletion vectors."""
    orders, customers = f"delta.`{root / 'orders'}`", f"delta.`{root / 'customers'}`"
    spark.sql(f"DELETE FROM {orders} WHERE id % 11 = {epoch}")
    spark.sql(f"UPDATE {orders} SET amount = amount + {epoch} WHERE id % 7 = {epoch}")
    new = ", ".join(f"({i}, {i % 5}, {(i * epoch) % 60})" for i in range(190 + epoch * 5, 215))
    spark.sql(
        f"MERGE INTO {orders} t USING (SELECT * FROM VALUES {new} AS s(id, cid, amount)) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.sql(f"UPDATE {customers} SET name = 'renamed{epoch}' WHERE cid = {epoch}")
    if epoch == 2:
        spark.sql(f"DELETE FROM {customers} WHERE cid = 5")


def expected(spark: SparkSession, root: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    for table in ("orders", "customers"):
        spark.read.format("delta").load(str(root / table)).createOrReplaceTempView(table)
    return {v: Counter(tuple(r) for r in spark.sql(sql).collect()) for v, sql in VIEWS.items()}


def read_view(pipeline: Path, view: str) -> Counter[tuple[Any, ...]]:
    rows = json.loads(cli("read", str(pipeline), view, "--format", "json"))
    return Counter(tuple(r.values()) for r in rows)


def deletion_vectors(table: Path) -> int:
    """How many files of ``table``'s log carry a deletion vector descriptor."""
    found = 0
    for commit in sorted((table / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            add = json.loads(line).get("add")
            found += bool(add and add.get("deletionVector"))
    return found


def test_tables_with_deletion_vectors_and_column_mapping_are_sources(
    spark: SparkSession, tmp_path: Path
) -> None:
    create_tables(spark, tmp_path)
    pipeline = pipeline_file(tmp_path)
    for epoch in range(4):
        if epoch:
            change_tables(spark, tmp_path, epoch)
        cli("run", str(pipeline))
        want = expected(spark, tmp_path)
        for view in VIEWS:
            assert read_view(pipeline, view) == want[view], (view, epoch)
    assert deletion_vectors(tmp_path / "orders") > 0
    assert deletion_vectors(tmp_path / "customers") > 0

    # a column added is not part of the source until it is rebuilt: views go on
    spark.sql(f"ALTER TABLE delta.`{tmp_path / 'orders'}` ADD COLUMN note STRING")
    spark.sql(f"INSERT INTO delta.`{tmp_path / 'orders'}` VALUES (500, 1, 45, 'new')")
    cli("run", str(pipeline))
    assert read_view(pipeline, "large") == expected(spark, tmp_path)["large"]

    # a column no view reads renamed under column mapping: the source holds it as
    # NULL from then on (one difference of table and trace), no rebuild
    customers = f"delta.`{tmp_path / 'customers'}`"
    spark.sql(f"ALTER TABLE {customers} RENAME COLUMN region TO area")
    spark.sql(f"UPDATE {customers} SET name = 'after' WHERE cid = 0")
    said = cli("run", str(pipeline))
    assert "columns no view reads are NULL from now on: region" in " ".join(said.split())
    want = expected(spark, tmp_path)
    for view in VIEWS:
        assert read_view(pipeline, view) == want[view], view
    # one a view reads stops the run, naming the source, the column and the
    # rebuild to run; nothing is committed
    spark.sql(f"ALTER TABLE {customers} RENAME COLUMN name TO label")
    spark.sql(f"UPDATE {customers} SET label = 'later' WHERE cid = 1")
    before = [s["upper"] for s in json.loads(cli("status", str(pipeline), "--json"))["sources"]]
    said = cli("run", str(pipeline), code=4)
    assert "'customers'" in said and "['name']" in said and "renamed or dropped" in said
    assert f"dd-etl rebuild {pipeline} --source customers" in " ".join(said.split())
    after = json.loads(cli("status", str(pipeline), "--json"))["sources"]
    assert [s["upper"] for s in after] == before
    # both renamed back, the run takes the change in, and the column no view read
    spark.sql(f"ALTER TABLE {customers} RENAME COLUMN label TO name")
    spark.sql(f"ALTER TABLE {customers} RENAME COLUMN area TO region")
    said = cli("run", str(pipeline))
    assert "every column read again" in said, said
    want = expected(spark, tmp_path)
    for view in VIEWS:
        assert read_view(pipeline, view) == want[view], view
    assert "ok" in cli("verify", str(pipeline))


@pytest.mark.slow
def test_a_run_killed_reading_a_change_feed_through_spark_is_completed_by_the_next(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Column mapping keeps delta-rs from reading the feed: Spark's reader does."""
    create_tables(spark, tmp_path)
    spark.sql(
        f"ALTER TABLE delta.`{tmp_path / 'orders'}` SET TBLPROPERTIES "
        "('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '3', "
        "'delta.minWriterVersion' = '7')"
    )
    pipeline = pipeline_file(tmp_path)
    cli("run", str(pipeline))
    change_tables(spark, tmp_path, 1)
    killed = subprocess.run(
        [sys.executable, "-c", "from dd_etl.cli import app; app()", "run", str(pipeline)],
        env={**os.environ, "DD_ETL_FAILPOINTS": "source.feed_planned=1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    cli("run", str(pipeline))
    want = expected(spark, tmp_path)
    for view in VIEWS:
        assert read_view(pipeline, view) == want[view], view
    status = json.loads(cli("status", str(pipeline), "--json"))
    assert [s["upper"] for s in status["sources"]] == [2, 2]


NEWER = {
    "by_kind": "SELECT kind, COUNT(*) AS n, MAX(at) AS latest FROM events GROUP BY kind",
    "joined": "SELECT e.id, e.kind, a.v FROM events e JOIN amounts a ON e.id = a.id",
}


def newer_pipeline(root: Path) -> Path:
    sources = {"events": "id", "amounts": "id"}
    return delta_pipeline(root, "newer_delta", sources, NEWER, materialize=False)


def newer_expected(spark: SparkSession, root: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    for table in ("events", "amounts"):
        spark.read.format("delta").load(str(root / table)).createOrReplaceTempView(table)

    def plain(value: Any) -> Any:  # as `read --format json` writes it
        return value.isoformat() if isinstance(value, datetime) else value

    return {
        v: Counter(tuple(plain(x) for x in r) for r in spark.sql(sql).collect())
        for v, sql in NEWER.items()
    }


def test_tables_with_newer_features_are_sources(spark: SparkSession, tmp_path: Path) -> None:
    """Row tracking, liquid clustering, v2 checkpoints, in-commit timestamps and a
    timestampNtz column on one table; type widening on another: a widened column
    stops the run, naming it and the rebuild, after which the source is taken in
    with its new type."""
    events, amounts = f"delta.`{tmp_path / 'events'}`", f"delta.`{tmp_path / 'amounts'}`"
    spark.sql(
        f"CREATE TABLE {events} (id BIGINT, kind STRING, at TIMESTAMP_NTZ) USING delta "
        "CLUSTER BY (kind) TBLPROPERTIES ('delta.enableRowTracking' = 'true', "
        "'delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2', "
        "'delta.enableInCommitTimestamps' = 'true', 'delta.enableChangeDataFeed' = 'true', "
        "'delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(
        f"CREATE TABLE {amounts} (id BIGINT, v SMALLINT) USING delta TBLPROPERTIES "
        "('delta.enableTypeWidening' = 'true', 'delta.enableChangeDataFeed' = 'true')"
    )
    at = "TIMESTAMP_NTZ '2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, id, 0, 0)"
    spark.sql(f"INSERT INTO {events} SELECT id, concat('k', id % 4), {at} FROM range(60)")
    spark.sql(f"INSERT INTO {amounts} SELECT id, CAST(id * 3 AS SMALLINT) FROM range(0, 60, 2)")
    pipeline = newer_pipeline(tmp_path)
    for epoch in range(3):
        if epoch:
            spark.sql(f"DELETE FROM {events} WHERE id % 9 = {epoch}")
            spark.sql(f"UPDATE {events} SET kind = 'moved' WHERE id % 7 = {epoch}")
            spark.sql(
                f"MERGE INTO {events} t USING (SELECT id, 'merged' AS kind, {at} AS at "
                f"FROM range({50 + epoch * 10}, {70 + epoch * 10})) s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
            spark.sql(f"UPDATE {amounts} SET v = v + 1 WHERE id % 4 = {epoch}")
        cli("run", str(pipeline))
        want = newer_expected(spark, tmp_path)
        for view in NEWER:
            assert read_view(pipeline, view) == want[view], (view, epoch)
    protocol = json.loads(
        next(
            line
            for f in sorted((tmp_path / "events" / "_delta_log").glob("*.json"))
            for line in f.read_text().splitlines()
            if '"protocol"' in line
        )
    )["protocol"]
    for feature in ("rowTracking", "clustering", "v2Checkpoint", "inCommitTimestamp"):
        assert feature in protocol["writerFeatures"], feature
    assert list((tmp_path / "events" / "_delta_log").glob("*.checkpoint.*"))

    # a widened column is lost history until the source is taken in again
    spark.sql(f"ALTER TABLE {amounts} ALTER COLUMN v TYPE INT")
    spark.sql(f"INSERT INTO {amounts} VALUES (2, 100000)")
    said = cli("run", str(pipeline), code=4)
    assert "'amounts'" in said and "v (smallint → int)" in said
    assert f"dd-etl rebuild {pipeline} --source amounts" in " ".join(said.split())
    cli("rebuild", str(pipeline), "--source", "amounts")
    cli("run", str(pipeline))
    want = newer_expected(spark, tmp_path)
    for view in NEWER:
        assert read_view(pipeline, view) == want[view], view
    assert "ok" in cli("verify", str(pipeline))

    # a feature no reader here knows: refused, naming the source and the feature
    epochs = source_epochs(pipeline)
    require_reader_feature(tmp_path / "amounts", "someFutureFeature")
    said = " ".join(cli("run", str(pipeline), code=3).split())
    assert "source 'amounts'" in said and "someFutureFeature" in said, said
    assert "DROP FEATURE" in said and "Nothing was committed" in said
    assert source_epochs(pipeline) == epochs


def source_epochs(pipeline: Path) -> dict[str, Any]:
    sources = json.loads(cli("status", str(pipeline), "--json"))["sources"]
    return {s["name"]: (s["upper"], s["position"]) for s in sources}


def require_reader_feature(table: Path, feature: str) -> None:
    """Commit to ``table`` (by hand, as a newer writer would) a protocol that requires
    ``feature`` of every reader."""
    log = sorted((table / "_delta_log").glob("*.json"))
    protocol = next(
        json.loads(line)["protocol"]
        for f in reversed(log)
        for line in f.read_text().splitlines()
        if '"protocol"' in line
    )
    for kind in ("readerFeatures", "writerFeatures"):
        protocol[kind] = [*protocol.get(kind, []), feature]
    protocol.update(minReaderVersion=3, minWriterVersion=7)
    commit = {"timestamp": 0, "operation": "SET TBLPROPERTIES", "operationParameters": {}}
    lines = [json.dumps({"commitInfo": commit}), json.dumps({"protocol": protocol})]
    version = int(log[-1].stem) + 1
    (table / "_delta_log" / f"{version:020}.json").write_text("\n".join(lines) + "\n")
