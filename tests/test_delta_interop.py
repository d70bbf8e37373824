"""Every kind of table dd_etl writes (traces, materialized sinks, change feeds) is a
Delta table both delta-spark and delta-rs read: the same rows, the same history,
time travel to each version."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from tests.support.pipeline_fixtures import change_data, write_pipeline

pytestmark = pytest.mark.spark


def rows_by_spark(spark: SparkSession, path: Path, version: int | None = None) -> Counter[str]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return Counter(repr(sorted(r.asDict().items())) for r in reader.load(str(path)).collect())


def rows_by_delta_rs(path: Path, version: int | None = None) -> Counter[str]:
    table = DeltaTable(str(path), version=version).to_pyarrow_table()
    return Counter(repr(sorted(r.items())) for r in table.to_pylist())


def test_traces_sinks_and_change_feeds_read_in_delta_spark_and_delta_rs(
    spark: SparkSession, tmp_path: Path
) -> None:
    pipeline = write_pipeline(tmp_path, "interop_views")
    for epoch in range(3):
        change_data(tmp_path, epoch)
        result = CliRunner().invoke(app, ["run", str(pipeline)])
        assert result.exit_code == 0, result.stderr
    warehouse = tmp_path / "warehouse"
    traces = [p.parent for p in warehouse.glob("**/_delta_log")]
    assert {"sources", "views"} <= {p.relative_to(warehouse).parts[0] for p in traces}
    tables = [*traces, tmp_path / "out" / "by_pc", tmp_path / "out" / "zoned_changes"]
    for table in tables:
        history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
        versions = sorted(int(h["version"]) for h in history)
        assert versions == list(range(DeltaTable(str(table)).version() + 1)), table
        assert rows_by_spark(spark, table) == rows_by_delta_rs(table), table
        for version in {1, versions[-1] // 2, versions[-1]} & set(versions):
            want = rows_by_delta_rs(table, version)
            assert rows_by_spark(spark, table, version) == want, (table, version)
