"""A parquet source's schema read from its footer in the driver is the one Spark
would infer with a job of its own; for the types Spark interprets itself it is
left to Spark. A file read before is rewritten when its size or modification
time differs from what its position recorded."""

from __future__ import annotations

import datetime
import decimal
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from dd_etl.lake import Location
from dd_etl.lake.objects import listing
from dd_etl.sources.files import footer_schema, rewritten_files, stamp_of

pytestmark = pytest.mark.spark


def test_a_footer_gives_the_schema_spark_infers(spark: SparkSession, tmp_path: Path) -> None:
    table = pa.table(
        {
            "i8": pa.array([1], pa.int8()),
            "i32": pa.array([1], pa.int32()),
            "i64": pa.array([1], pa.int64()),
            "f32": pa.array([1.5], pa.float32()),
            "f64": pa.array([1.5], pa.float64()),
            "flag": pa.array([True]),
            "name": pa.array(["a"]),
            "raw": pa.array([b"a"]),
            "day": pa.array([datetime.date(2026, 1, 1)]),
            "amount": pa.array([decimal.Decimal("1.25")], pa.decimal128(10, 2)),
            "required": pa.array([1], pa.int64()),
        }
    )
    schema = table.schema.set(
        table.schema.get_field_index("required"), pa.field("required", pa.int64(), False)
    )
    path = tmp_path / "plain.parquet"
    pq.write_table(table.cast(schema), path)
    assert footer_schema(Location.of(path)) == spark.read.parquet(str(path)).schema


@pytest.mark.parametrize(
    "column",
    [
        pa.array([datetime.datetime(2026, 1, 1)], pa.timestamp("us")),
        pa.array([1], pa.uint32()),
        pa.array([[1]], pa.list_(pa.int64())),
    ],
)
def test_other_types_are_left_to_spark(tmp_path: Path, column: pa.Array) -> None:
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": column}), path)
    assert footer_schema(Location.of(path)) is None


def test_a_file_is_rewritten_when_its_size_or_modification_time_changed(tmp_path: Path) -> None:
    for name in ("same.csv", "touched.csv", "longer.csv", "sized.csv"):
        (tmp_path / name).write_text("id\n1\n")
    stamps = {o.name: stamp_of(o) for o in listing(Location.of(tmp_path))}
    read = {name: stamps[name] for name in ("same.csv", "touched.csv", "longer.csv")}
    read["sized.csv"] = 5  # a position of an earlier dd_etl: the size alone
    read["gone.csv"] = [5, 0]  # gone, not rewritten: restate and verify look for that
    seconds = (tmp_path / "touched.csv").stat().st_mtime
    os.utime(tmp_path / "touched.csv", (seconds + 1, seconds + 1))
    (tmp_path / "longer.csv").write_text("id\n12\n")
    os.utime(tmp_path / "sized.csv", (seconds + 1, seconds + 1))
    now = {o.name: stamp_of(o) for o in listing(Location.of(tmp_path))}
    assert rewritten_files(read, now) == ["longer.csv", "touched.csv"]
