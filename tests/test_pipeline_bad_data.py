"""Bad data and lost history: a clear error, nothing committed, and the next run
after the fix works."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app

pytestmark = pytest.mark.spark


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_bad_csv_value_commits_nothing(spark: SparkSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.csv").write_text("id,amount\n1,10\n2,20\n")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        textwrap.dedent(
            """\
            name: csvs
            warehouse: wh
            sources:
              payments: {format: csv, path: data, schema: {id: bigint, amount: bigint}}
            views:
              total: {sql: "SELECT COUNT(*) AS n, SUM(amount) AS amount FROM payments"}
            """
        )
    )
    assert invoke("run", str(pipeline))[0] == 0
    (data / "b.csv").write_text("id,amount\n3,thirty\n")
    code, _, err = invoke("run", str(pipeline))
    assert code == 3, err
    assert "source 'payments'" in err and "thirty" in err and "Nothing was committed" in err
    status = json.loads(invoke("status", str(pipeline), "--json")[1])
    assert status["sources"][0]["upper"] == 1
    (data / "b.csv").write_text("id,amount\n3,30\n")
    assert invoke("run", str(pipeline))[0] == 0
    code, out, _ = invoke("read", str(pipeline), "total", "--format", "csv")
    assert out == "n,amount\n3,60\n"


def test_a_vacuumed_change_feed_stops_the_run_until_resynced(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    rows = pa.Table.from_pylist([{"id": 1, "v": "a"}], schema)
    write_deltalake(table, rows, configuration={"delta.enableChangeDataFeed": "true"})
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        "name: vac\nwarehouse: wh\nsources:\n  t: {format: delta, path: t, key: [id]}\n"
        "views:\n  v: {sql: 'SELECT id, v FROM t'}\n"
    )
    assert invoke("run", str(pipeline))[0] == 0
    # changes the pipeline has not read, then rewritten and vacuumed away
    write_deltalake(table, pa.Table.from_pylist([{"id": 2, "v": "b"}], schema), mode="append")
    write_deltalake(table, pa.Table.from_pylist([{"id": 3, "v": "c"}], schema), mode="overwrite")
    DeltaTable(table).vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False)
    code, _, err = invoke("run", str(pipeline))
    assert code == 4, err
    assert "lost history" in err and f"dd-etl rebuild {pipeline} --source t" in err
    assert invoke("rebuild", str(pipeline), "--source", "t")[0] == 0
    assert invoke("run", str(pipeline))[0] == 0
    code, out, _ = invoke("read", str(pipeline), "v", "--format", "csv")
    assert out == "id,v\n3,c\n"
    assert invoke("verify", str(pipeline))[0] == 0
