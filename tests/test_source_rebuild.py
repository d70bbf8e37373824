"""A Delta source's columns changing under it, as a Spark user meets it: tables
written by delta-spark with deletion vectors, column mapping, type widening and
the change feed; views that arrange, join and reduce the source. Columns no view
reads renamed, dropped or widened: the run goes on, holding them as NULL, no
rebuild. One a view reads widened: the run stops, and the source is started over
(`rebuild --source`). After each, every view, materialized table and change feed
equals plain Spark SQL over the tables: nothing the old history computed is
counted again on top of the new one."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from tests.support.delta_pipelines import delta_pipeline
from tests.support.trace_rows import view_contents

pytestmark = pytest.mark.spark

ROWS = 3_000
VIEWS = {
    "by_group": "SELECT grp, COUNT(*) AS n, SUM(amount) AS total, MIN(amount) AS lo, "
    "MAX(amount) AS hi FROM events GROUP BY grp",
    "big_by_region": "SELECT e.id, e.amount, g.region FROM events e JOIN groups g "
    "ON e.grp = g.grp WHERE e.amount > 5",
    "doubled": "SELECT id, grp, amount * 2 AS amount2 FROM events",
}


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.stdout, result.stderr)
    return result.stdout + result.stderr


def write_pipeline(root: Path) -> Path:
    sources = {"events": "id", "groups": "grp"}
    return delta_pipeline(root, "source_rebuild", sources, VIEWS, materialize=True, changes=True)


def create_tables(spark: SparkSession, root: Path) -> None:
    spark.sql(
        f"CREATE TABLE delta.`{root / 'events'}` (id BIGINT, grp INT, amount INT, "
        "note STRING, extra SMALLINT) USING delta TBLPROPERTIES ("
        "'delta.enableDeletionVectors' = 'true', 'delta.columnMapping.mode' = 'name', "
        "'delta.enableChangeDataFeed' = 'true', 'delta.enableTypeWidening' = 'true')"
    )
    spark.sql(
        f"INSERT INTO delta.`{root / 'events'}` SELECT id, CAST(id % 40 AS INT), "
        "CAST((id * 7) % 50 AS INT), concat('n', id), CAST(id % 3 AS SMALLINT) "
        f"FROM range({ROWS})"
    )
    spark.sql(
        f"CREATE TABLE delta.`{root / 'groups'}` (grp INT, region STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(
        f"INSERT INTO delta.`{root / 'groups'}` "
        "SELECT CAST(id AS INT), concat('r', id % 3) FROM range(40)"
    )


def change_events(spark: SparkSession, root: Path, epoch: int) -> None:
    """A DELETE, an UPDATE and a MERGE through Spark SQL, each a deletion vector."""
    events = f"delta.`{root / 'events'}`"
    spark.sql(f"DELETE FROM {events} WHERE id % 97 = {epoch}")
    spark.sql(f"UPDATE {events} SET amount = amount + {epoch} WHERE id % 89 = {epoch}")
    spark.sql(
        f"MERGE INTO {events} t USING (SELECT id, CAST(id % 40 AS INT) AS grp, "
        f"CAST({epoch} AS INT) AS amount FROM range({ROWS - 50}, {ROWS + 20 * epoch})) s "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET t.amount = s.amount "
        "WHEN NOT MATCHED THEN INSERT (id, grp, amount) VALUES (s.id, s.grp, s.amount)"
    )


def bag(records: Any) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in records)


def spark_sql(spark: SparkSession, root: Path) -> dict[str, Counter[str]]:
    """Each view's query in Spark SQL over the tables as they are now."""
    for table in ("events", "groups"):
        spark.read.format("delta").load(str(root / table)).createOrReplaceTempView(table)
    return {v: bag(r.asDict() for r in spark.sql(sql).collect()) for v, sql in VIEWS.items()}


def assert_outputs_equal_spark_sql(spark: SparkSession, root: Path) -> None:
    """Each view (its trace as a Delta reader finds it), its materialized table and
    its change feed summed over every epoch equal the view's query in Spark SQL."""
    want = spark_sql(spark, root)
    for view in VIEWS:
        assert view_contents(root / "wh", view) == want[view], view
        materialized = DeltaTable(str(root / "out" / view)).to_pyarrow_table()
        assert bag(materialized.to_pylist()) == want[view], view
        summed: Counter[str] = Counter()
        for row in DeltaTable(str(root / "feeds" / view)).to_pyarrow_table().to_pylist():
            diff, _ = row.pop("_diff"), row.pop("_epoch")
            summed[json.dumps(row, sort_keys=True, default=str)] += diff
        assert +summed == want[view] and not -summed, view


def test_a_source_started_over_is_not_counted_twice(spark: SparkSession, tmp_path: Path) -> None:
    create_tables(spark, tmp_path)
    pipeline = write_pipeline(tmp_path)
    events = f"delta.`{tmp_path / 'events'}`"
    for epoch in range(2):
        if epoch:
            change_events(spark, tmp_path, epoch)
        cli("run", str(pipeline))
    assert_outputs_equal_spark_sql(spark, tmp_path)

    # a column no view reads is renamed: the source holds it as NULL from then on,
    # taken by one difference of the table and the trace; no view is rebuilt
    spark.sql(f"ALTER TABLE {events} RENAME COLUMN note TO remark")
    change_events(spark, tmp_path, 2)
    said = cli("run", str(pipeline))
    assert "columns no view reads are NULL from now on: note" in " ".join(said.split()), said
    assert "rebuilt" not in said, said
    assert_outputs_equal_spark_sql(spark, tmp_path)

    # one dropped, one widened, neither read by a view; then the feed again
    spark.sql(f"ALTER TABLE {events} DROP COLUMN remark")
    spark.sql(f"ALTER TABLE {events} ALTER COLUMN extra TYPE INT")
    change_events(spark, tmp_path, 3)
    said = cli("run", str(pipeline))
    assert "NULL from now on: extra, note" in " ".join(said.split()), said
    assert_outputs_equal_spark_sql(spark, tmp_path)
    change_events(spark, tmp_path, 4)
    said = cli("run", str(pipeline))
    assert "(diff" not in said, said
    assert_outputs_equal_spark_sql(spark, tmp_path)

    # widened where views read it: the run stops, naming the source, the column and
    # the rebuild; the rebuild starts the source over, their plans change too, and
    # the run rebuilds them
    spark.sql(f"ALTER TABLE {events} ALTER COLUMN amount TYPE BIGINT")
    change_events(spark, tmp_path, 5)
    said = cli("run", str(pipeline), code=4)
    assert "'events'" in said and "amount (int → bigint)" in said, said
    assert f"dd-etl rebuild {pipeline} --source events" in " ".join(said.split())
    cli("rebuild", str(pipeline), "--source", "events")
    said = cli("run", str(pipeline))
    for view in VIEWS:
        assert f"rebuilt {view}: its definition changed" in said, said
    assert_outputs_equal_spark_sql(spark, tmp_path)
    change_events(spark, tmp_path, 6)
    cli("run", str(pipeline))
    assert_outputs_equal_spark_sql(spark, tmp_path)
    assert "ok" in cli("verify", str(pipeline))
    read = json.loads(cli("read", str(pipeline), "by_group", "--format", "json"))
    assert bag(read) == spark_sql(spark, tmp_path)["by_group"]
