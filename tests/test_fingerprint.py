"""Node ids name what a definition computes: equal in every process for the same
definition, different when a Python function captures or reads other values."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from dd_etl.errors import PlanError
from dd_etl.plan.column_names import (
    ColumnName,
    ColumnText,
    cast_literal,
    column,
    hash_bucket,
    is_not_null,
    renamed,
    shifted_right,
)
from dd_etl.plan.fingerprint import canonical, function_id
from dd_etl.sql_syntax import quote

SCALE = 3


def scaled_by(factor: int) -> Callable[[Any], Any]:
    def scale(rows: Any) -> Any:
        return rows.assign(total=rows["value"] * factor)

    return scale


def reads_a_global(rows: Any) -> Any:
    return rows * SCALE


def test_closures_over_different_values_are_different_functions() -> None:
    assert function_id(scaled_by(1)) != function_id(scaled_by(5))
    assert function_id(scaled_by(5)) == function_id(scaled_by(5))


def test_the_globals_a_function_reads_are_part_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = function_id(reads_a_global)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 4)
    assert function_id(reads_a_global) != before


# A function with a comprehension and a lambda: their code objects' repr holds
# memory addresses, which differ from process to process.
NESTED = """
import sys
from dd_etl.plan.fingerprint import function_id

def top(rows):
    keep = [c for c in rows.columns if c != "_diff"]
    pick = lambda df: df[keep]
    return pick(rows)

print(function_id(top))
"""


def test_the_same_function_has_the_same_id_in_every_process() -> None:
    ids = {
        subprocess.run(
            [sys.executable, "-c", NESTED],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent.parent,
        ).stdout.strip()
        for _ in range(3)
    }
    assert len(ids) == 1 and next(iter(ids)).startswith("fn(__main__.top:")


def test_a_function_reading_a_value_without_stable_text_needs_a_version() -> None:
    lock = threading.Lock()  # its repr names its address

    def guarded(rows: Any) -> Any:
        with lock:
            return rows

    with pytest.raises(PlanError, match="version="):
        function_id(guarded)
    assert function_id(guarded, version="2") == function_id(guarded, version="2")
    assert function_id(guarded, version="2") != function_id(guarded, version="3")


NAMES = ["a", "order_id_2", "__agg", "Upper", "select", "null", "a b", "it's", "1a", "é"]


@pytest.mark.spark
@pytest.mark.parametrize("name", NAMES)
def test_a_column_named_without_the_jvm_prints_in_a_node_id_as_spark_prints_it(
    spark: SparkSession, name: str
) -> None:
    """Plan ids name traces: a column made as SQL text must not change them."""
    made = column(name)
    assert isinstance(made, ColumnName)
    assert canonical(made) == canonical(F.col(name))
    assert spark.range(1).selectExpr(f"0 AS {quote(name)}").select(made).columns == [name]


@pytest.mark.spark
@pytest.mark.parametrize("name", ["a.b", "`a`"])
def test_a_name_spark_parses_stays_a_spark_column(spark: SparkSession, name: str) -> None:
    assert not isinstance(column(name), ColumnName)


def test_a_column_name_copies_and_pickles_as_itself() -> None:
    made = ColumnName("a b")
    for again in (copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert (str(again), again.name) == ("`a b`", "a b")


@pytest.mark.spark
@pytest.mark.parametrize("name", NAMES)
def test_a_column_computed_without_the_jvm_prints_and_evaluates_as_sparks(
    spark: SparkSession, name: str
) -> None:
    """The columns a MIN/MAX hierarchy, a top-k's buckets, a union's padding and
    grouping sets make as SQL text: the node id Spark's column would give, and
    the same values."""
    pairs: list[tuple[ColumnText | Column, Column]] = [
        (is_not_null(name), F.col(name).isNotNull()),
        (renamed(name, "it's"), F.col(name).alias("it's")),
        (hash_bucket([name]), F.xxhash64(name).bitwiseAND(0xFFFFFFFF).cast("long")),
        (
            hash_bucket([name, "b"], 24),
            F.shiftrightunsigned(F.xxhash64(name, "b").bitwiseAND(0xFFFFFFFF), 24).cast("long"),
        ),
        (shifted_right(name, 24), F.shiftrightunsigned(name, 24)),
        (
            cast_literal(None, T.DecimalType(10, 2), name),
            F.lit(None).cast("decimal(10,2)").alias(name),
        ),
        (cast_literal(5, T.LongType()), F.lit(5).cast("long")),
    ]
    rows = spark.range(3).selectExpr(f"id * 7 - 3 AS {quote(name)}", "CAST(id AS STRING) AS b")
    for made, spark_column in pairs:
        assert isinstance(made, ColumnText), made
        assert canonical(made) == canonical(spark_column)
        assert rows.selectExpr(made).collect() == rows.select(spark_column).collect()


@pytest.mark.spark
@pytest.mark.parametrize(
    "data_type",
    [
        T.LongType(), T.IntegerType(), T.ShortType(), T.ByteType(), T.StringType(), T.DoubleType(),
        T.FloatType(), T.DecimalType(38, 6), T.BooleanType(), T.DateType(), T.TimestampType(),
        T.TimestampNTZType(), T.BinaryType(),
    ],
)  # fmt: skip
def test_a_null_of_a_type_prints_as_sparks(spark: SparkSession, data_type: T.DataType) -> None:
    made = cast_literal(None, data_type, "a b")
    assert canonical(made) == canonical(F.lit(None).cast(data_type).alias("a b"))
    assert (
        spark.range(1).selectExpr(made).schema
        == spark.range(1).select(F.lit(None).cast(data_type).alias("a b")).schema
    )


@pytest.mark.spark
def test_what_spark_must_parse_or_print_stays_a_spark_column(spark: SparkSession) -> None:
    for made in (
        is_not_null("a.b"),
        renamed("a", "`b`"),
        hash_bucket(["a", "b.c"]),
        cast_literal(None, T.ArrayType(T.StringType())),
    ):
        assert isinstance(made, Column) and not isinstance(made, str)


def test_column_texts_copy_and_pickle_as_themselves() -> None:
    made = cast_literal(None, T.LongType(), "a b")
    for again in (copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert isinstance(again, ColumnText)
        assert (str(again), again.printed) == (str(made), "CAST(NULL AS BIGINT) AS a b")
