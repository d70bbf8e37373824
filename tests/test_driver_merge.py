"""Merge steps made in the driver give the batch Spark's merge would: times
advanced, equal updates summed as Spark's grouping finds them equal, zeros
dropped, rows in key-hash order."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dd_etl.arrow_schema import arrow_schema
from dd_etl.lake import Location
from dd_etl.lattice import Antichain, advance_by
from dd_etl.trace import driver_merge, spark_files
from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import DIFF, KEY_HASH, TIME, time_columns
from dd_etl.trace.spine import HASH_SPACE, HashRange
from dd_etl.trace.state import TraceState

DATA = StructType(
    [
        StructField("k", LongType()),
        StructField("x", DoubleType()),
        StructField("s", StringType()),
        StructField("d", DecimalType(10, 2)),
        StructField("day", DateType()),
        StructField("at", TimestampType()),
    ]
)
WHOLE = HashRange.between(0, HASH_SPACE)

rows = st.tuples(
    st.integers(0, 3),
    st.sampled_from([0.0, -0.0, math.nan, 1.5, None]),
    st.sampled_from(["a", "b", None]),
    st.sampled_from([Decimal("1.10"), Decimal("-2.00"), None]),
    st.sampled_from([dt.date(2024, 1, 1), None]),
    st.sampled_from([dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC), None]),
    st.integers(0, 5),  # epoch
    st.integers(-2, 2),  # diff
)


def state(dims: int = 1) -> TraceState:
    return TraceState.new("t", dims, ("k",), DATA.json())


def write(spark: SparkSession, root: Path, updates: list[tuple[Any, ...]]) -> list[DataFile]:
    """The updates as one stored file, hashed by Spark, and its description."""
    trace = state()
    book = [StructField(TIME, LongType()), StructField(DIFF, LongType())]
    schema = StructType([*DATA.fields, *book])
    frame = spark.createDataFrame(updates, schema)
    stored = spark_files.to_stored(trace, frame).toArrow()
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(stored, root / "data" / "f.parquet")
    return [DataFile("data/f.parquet", 0, stored.num_rows, None)]


def spark_merge(
    spark: SparkSession, root: Path, files: list[DataFile], since: Antichain
) -> pa.Table:
    trace = state()
    df = spark_files.read_files(spark, Location.of(root), trace, files)
    return spark_files.consolidate(spark_files.advance_times(df, 1, since), 1).toArrow()


def as_rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    """Rows comparable across NaN (which equals nothing)."""

    def plain(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v

    return Counter(tuple(plain(v) for v in r.values()) for r in table.to_pylist())


@pytest.mark.spark
@settings(max_examples=25, deadline=None)
@given(updates=st.lists(rows, max_size=30), since=st.integers(0, 6))
def test_a_driver_merge_equals_sparks(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, updates: list[Any], since: int
) -> None:
    root = tmp_path_factory.mktemp("merge")
    files = write(spark, root, updates)
    frontier = Antichain.from_epoch(since)
    mine = driver_merge.merged(Location.of(root), state(), files, WHOLE, frontier)
    assert mine is not None
    theirs = spark_merge(spark, root, files, frontier)
    assert [(f.name, f.type) for f in mine.schema] == [(f.name, f.type) for f in theirs.schema]
    assert as_rows(mine) == as_rows(theirs)
    hashes = mine.column(KEY_HASH).to_pylist()
    assert hashes == sorted(hashes)
    zeros = [x for x in mine.column("x").to_pylist() if x == 0.0]
    assert all(math.copysign(1.0, x) == 1.0 for x in zeros)  # -0.0 normalised, as Spark does


def test_times_advance_per_coordinate_to_the_least_join_over_the_frontier() -> None:
    outer, inner = time_columns(2)
    times = [(0, 7), (5, 1), (9, 3)]
    table = pa.table(
        {
            outer: pa.array([t[0] for t in times], pa.int64()),
            inner: pa.array([t[1] for t in times], pa.int64()),
        }
    )
    frontier = Antichain.of((4, 2), (6, 0))
    out = driver_merge.advanced(table, 2, frontier)
    expected = [advance_by(t, frontier) for t in times]
    got = zip(out.column(outer).to_pylist(), out.column(inner).to_pylist(), strict=True)
    assert list(got) == expected


def test_nested_columns_and_large_merges_are_left_to_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    nested = TraceState.new(
        "t", 1, ("k",), StructType([*DATA.fields, StructField("xs", ArrayType(LongType()))]).json()
    )
    assert (
        driver_merge.merged(Location.of(tmp_path), nested, [], WHOLE, Antichain.from_epoch(0))
        is None
    )
    many = [DataFile("data/f.parquet", 0, driver_merge.DRIVER_MERGED_RECORDS + 1, None)]
    assert (
        driver_merge.merged(Location.of(tmp_path), state(), many, WHOLE, Antichain.from_epoch(0))
        is None
    )


def test_only_the_slice_of_the_hash_space_is_merged(spark: SparkSession, tmp_path: Path) -> None:
    files = write(spark, tmp_path, [(k, 1.0, "a", None, None, None, 0, 1) for k in range(20)])
    every = driver_merge.merged(
        Location.of(tmp_path), state(), files, WHOLE, Antichain.from_epoch(0)
    )
    assert every is not None
    middle = sorted(every.column(KEY_HASH).to_pylist())[10]
    lower = driver_merge.merged(
        Location.of(tmp_path),
        state(),
        files,
        HashRange(-(1 << 63), middle),
        Antichain.from_epoch(0),
    )
    upper = driver_merge.merged(
        Location.of(tmp_path), state(), files, HashRange(middle, 1 << 63), Antichain.from_epoch(0)
    )
    assert lower is not None and upper is not None
    assert lower.num_rows == 10 and upper.num_rows == 10
    assert arrow_schema(spark_files.stored_schema(state())).names == every.column_names
