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


CSV_PIPELINE = """\
name: csv_{name}
warehouse: wh
sources:
  {source}:
    format: csv
    path: {path}
    schema: {schema}
    options: {options}
views:
  all_rows: {{sql: "SELECT * FROM {source}"}}
"""


def csv_pipeline(tmp_path: Path, name: str, source: str, schema: str, options: str = "{}") -> Path:
    """A pipeline of one CSV source under ``data/<source>`` and a view of all its rows."""
    (tmp_path / "data" / source).mkdir(parents=True)
    pipeline = tmp_path / "pipeline.yaml"
    text = CSV_PIPELINE.format(
        name=name, source=source, path=f"data/{source}", schema=schema, options=options
    )
    pipeline.write_text(text)
    return pipeline


@pytest.mark.parametrize(
    ("schema", "options", "text", "line"),
    [
        ("{id: bigint, amount: bigint}", "{}", "id,amount\n3,30\n4,40\n5,thirty\n6,60\n", 4),
        # a quoted line break, a comment and an empty line before it: all count as lines
        ("{id: bigint, note: string, amount: bigint}",
         '{sep: ";", multiLine: "true", comment: "#"}',
         'id;note;amount\n# paid late\n3;"two\nlines";30\n\n5;plain;thirty\n', 6),
    ],
)  # fmt: skip
def test_a_bad_csv_value_names_its_file_and_line(
    spark: SparkSession, tmp_path: Path, schema: str, options: str, text: str, line: int
) -> None:
    pipeline = csv_pipeline(tmp_path, "lines", "payments", schema, options)
    (tmp_path / "data" / "payments" / "b.csv").write_text(text)
    code, _, err = invoke("run", str(pipeline))
    assert code == 3, err
    said = " ".join(err.split())
    assert "source 'payments'" in said and "thirty" in said
    assert f"data/payments/b.csv line {line}, column amount, value 'thirty'" in said
    assert "Nothing was committed" in said


def test_a_file_rewritten_in_place_is_taken_in_by_restate(
    spark: SparkSession, tmp_path: Path
) -> None:
    pipeline = csv_pipeline(tmp_path, "restate", "fx", '{cur: string, rate: "decimal(10,2)"}')
    data = tmp_path / "data" / "fx"
    (data / "a.csv").write_text("cur,rate\nEUR,1.10\nGBP,1.30\n")
    (data / "b.csv").write_text("cur,rate\nJPY,0.01\n")
    assert invoke("run", str(pipeline))[0] == 0

    # written again, the same rows spelt differently: a run refuses it as rewritten
    # and names restate, which finds nothing to take in and lets the run go on
    (data / "a.csv").write_text("cur,rate\nEUR,1.1\nGBP,1.3\n")
    code, _, err = invoke("run", str(pipeline))
    assert code == 4, err
    said = " ".join(err.split())
    assert "['a.csv'] were rewritten" in said and f"dd-etl restate {pipeline} fx" in said
    code, out, err = invoke("restate", str(pipeline), "fx")
    assert code == 0, err
    assert "nothing to restate" in out
    assert invoke("run", str(pipeline))[0] == 0, "restate recorded the file as read"

    # corrected in place, same size: a row changed, one replaced. A run refuses it;
    # restate retracts the old rows and inserts the new ones
    (data / "a.csv").write_text("cur,rate\nEUR,1.2\nCHF,1.0\n")
    assert invoke("run", str(pipeline))[0] == 4
    code, out, err = invoke("restate", str(pipeline), "fx")
    assert code == 0, err
    assert "restated fx at epoch" in out and "4 changed rows" in out
    assert invoke("run", str(pipeline))[0] == 0
    code, out, _ = invoke("read", str(pipeline), "all_rows", "--format", "csv")
    assert sorted(out.splitlines()) == ["CHF,1.00", "EUR,1.20", "JPY,0.01", "cur,rate"]
    assert invoke("verify", str(pipeline))[0] == 0  # equal to a from-scratch computation

    # a correction with a bad value is refused where it lies; fixed, it is taken in
    (data / "b.csv").write_text("cur,rate\nJPY,0.01\nUSD,one\n")
    code, _, err = invoke("restate", str(pipeline), "fx")
    assert code == 3, err
    assert "data/fx/b.csv line 3, column rate, value 'one'" in " ".join(err.split())
    (data / "b.csv").write_text("cur,rate\nJPY,0.01\nUSD,1.00\n")
    assert invoke("restate", str(pipeline), "fx")[0] == 0
    assert invoke("run", str(pipeline))[0] == 0
    code, out, _ = invoke("read", str(pipeline), "all_rows", "--format", "csv")
    assert sorted(out.splitlines()) == ["CHF,1.00", "EUR,1.20", "JPY,0.01", "USD,1.00", "cur,rate"]
    assert invoke("verify", str(pipeline))[0] == 0
