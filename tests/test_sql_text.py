"""Plans built from SQL text: the same results as the column API, at a fixed
number of JVM calls however wide the operation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal

import py4j.clientserver
import py4j.protocol
import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    DateType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dd_etl import sql_text
from dd_etl.arrow_schema import arrow_schema
from dd_etl.local_relations import local_relation
from dd_etl.sql_text import quote

RELEASE = py4j.protocol.MEMORY_COMMAND_NAME
ODD = ["plain", "with space", "back`tick", "dot.ted"]
"""Column names SQL text must quote."""


@pytest.fixture
def odd(spark: SparkSession) -> DataFrame:
    rows = [(1, "a", 10, None), (1, "a", 5, 2), (2, None, 7, 3), (2, None, 1, 3)]
    kinds = {"with space": StringType()}
    schema = StructType([StructField(n, kinds.get(n, LongType())) for n in ODD])
    return spark.createDataFrame(rows, schema)


@contextmanager
def jvm_calls() -> Iterator[list[int]]:
    """How many commands Python sends the JVM in the block, besides releasing the
    JVM objects Python dropped (those come whenever the collector runs)."""
    seen = [0]
    send = py4j.clientserver.ClientServerConnection.send_command

    def counted(self: py4j.clientserver.ClientServerConnection, command: str) -> str:
        seen[0] += not command.startswith(RELEASE)
        return send(self, command)

    py4j.clientserver.ClientServerConnection.send_command = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        py4j.clientserver.ClientServerConnection.send_command = send  # type: ignore[method-assign]


def test_names_are_quoted_and_expressions_evaluated(odd: DataFrame) -> None:
    out = sql_text.select(odd, [f"{quote(c)} AS {quote(c + '!')}" for c in ODD] + ["1 + 1 AS two"])
    assert out.columns == [c + "!" for c in ODD] + ["two"]
    assert sorted(tuple(r) for r in out.collect()) == sorted(
        (*r, 2) for r in [tuple(x) for x in odd.collect()]
    )
    assert sql_text.columns(odd, ["dot.ted", "plain"]).columns == ["dot.ted", "plain"]
    assert sql_text.select(odd, []).columns == []


def test_an_item_holding_the_separator_takes_the_column_api(odd: DataFrame) -> None:
    out = sql_text.select(odd, ["plain", "'a\x1fb' AS s"])
    assert {r.s for r in out.collect()} == {"a\x1fb"}


@pytest.mark.parametrize("keys", [[], ["plain"], ["plain", "with space"]])
def test_group_computes_every_aggregate_per_key(odd: DataFrame, keys: list[str]) -> None:
    aggregates = [f"sum({quote('back`tick')}) AS s", f"max({quote('dot.ted')}) AS m"]
    got = sql_text.group(odd, keys, aggregates)
    expected = odd.groupBy(*keys).agg(*[sql_text.expr(odd.sparkSession, a) for a in aggregates])
    assert got.columns == [*keys, "s", "m"]
    assert sorted(map(tuple, got.collect()), key=str) == sorted(
        map(tuple, expected.collect()), key=str
    )


def test_wide_operations_cost_a_fixed_number_of_jvm_calls(odd: DataFrame) -> None:
    """The column API would make over a hundred calls for the 40 columns."""
    for width in (4, 40):
        exprs = [f"{quote(ODD[i % 4])} AS c{i}" for i in range(width)]

        def plan(exprs: list[str] = exprs) -> None:
            sql_text.select(odd, exprs)
            sql_text.group(odd, ["plain", "with space"], ["sum(plain) AS s"])

        plan()  # JVM classes and methods are looked up once, before counting
        with jvm_calls() as calls:
            plan()
        assert calls[0] == 2 + 4, width  # the select's, the group's


def test_types_as_text_cast_to_the_same_type(spark: SparkSession) -> None:
    nested = StructType(
        [
            StructField("a b", ArrayType(DecimalType(12, 2))),
            StructField("when", TimestampType()),
        ]
    )
    df = spark.range(1).selectExpr(f"{sql_text.cast('NULL', nested)} AS x")
    assert df.schema["x"].dataType == nested


def test_local_relations_hold_the_arrow_table_exactly(spark: SparkSession) -> None:
    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("at", TimestampType()),
            StructField("day", DateType()),
            StructField("amount", DecimalType(12, 2)),
            StructField("name", StringType()),
        ]
    )
    rows = [
        (1, datetime(2024, 3, 1, 12, 30, tzinfo=UTC), date(2024, 3, 1), Decimal("10.25"), "x"),
        (2, None, None, None, None),
    ]
    table = pa.Table.from_pylist(
        [dict(zip(schema.fieldNames(), r, strict=True)) for r in rows], arrow_schema(schema)
    )
    df = local_relation(spark, table, schema)
    assert df.schema == schema
    assert "LocalTableScan" in df._jdf.queryExecution().executedPlan().toString()
    back = pa.Table.from_batches(df._collect_as_arrow(), arrow_schema(schema))
    assert back.equals(table)
    empty = local_relation(spark, arrow_schema(schema).empty_table(), schema)
    assert empty.count() == 0
