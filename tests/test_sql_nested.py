"""Arrays and nested data against plain Spark SQL over the same rows, after
every epoch: LATERAL VIEW [OUTER] explode/posexplode, explode in the select
list, aggregates of exploded rows, from_json and struct and array fields."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from dd_etl.plan import Collection, Dataflow
from dd_etl.plan.sql import SqlError, compile_view
from dd_etl.runtime import Runtime
from tests.support.sql_oracle import Row, append_changes, mismatches, norm

pytestmark = pytest.mark.spark

BASKETS = StructType(
    [
        StructField("id", LongType()),
        StructField("customer", LongType()),
        StructField("items", ArrayType(StringType())),
        StructField("js", StringType()),
    ]
)
VIEWS = {
    "lines": "SELECT id, pos, item FROM baskets "
    "LATERAL VIEW OUTER posexplode(items) e AS pos, item WHERE item IS NULL OR item <> 'x'",
    "exploded": "SELECT customer, explode(items) AS item FROM baskets",
    "per_item": "SELECT item, COUNT(*) AS n, collect_set(customer) AS customers "
    "FROM baskets LATERAL VIEW explode(items) e AS item GROUP BY item",
    "fields": "SELECT id, from_json(js, 'a INT, b ARRAY<INT>').a AS a, "
    "from_json(js, 'a INT, b ARRAY<INT>').b[0] AS b0, size(items) AS n, "
    "get(items, 0) AS first, try_element_at(items, -1) AS last FROM baskets",
}


def basket(rng: random.Random, id_: int) -> Row:
    items = None if rng.random() < 0.15 else [rng.choice(["a", "b", "x", None]) for _ in range(3)]
    js = rng.choice(['{"a": 1, "b": [2, 3]}', '{"a": 4}', "not json", None])
    return (id_, rng.choice([1, 2, None]), items[: rng.randrange(4)] if items else items, js)


def plain_spark(spark: SparkSession, rows: list[Row]) -> dict[str, Counter[Row]]:
    spark.createDataFrame(rows, BASKETS).createOrReplaceTempView("baskets")
    return {
        name: Counter(norm(tuple(r)) for r in spark.sql(sql).collect())
        for name, sql in VIEWS.items()
    }


def test_nested_views_equal_plain_spark_sql_after_every_epoch(
    spark: SparkSession, tmp_path: Path
) -> None:
    rng = random.Random(3)
    flow = Dataflow(spark, tmp_path / "warehouse")
    tables: dict[str, Collection] = {"baskets": flow.source("baskets", BASKETS, key=["id"])}
    for name, sql in VIEWS.items():
        compile_view(flow, sql, tables, name=name)
    rt = Runtime(flow)
    live: dict[int, Row] = {}
    expected: list[dict[str, Counter[Row]]] = []
    epoch, next_id = 0, 0
    for epochs_in_run in (1, 2):
        for _ in range(epochs_in_run):
            changes: list[tuple[Row, int]] = []
            for id_ in rng.sample(sorted(live), k=min(len(live), 2)):  # updates and deletes
                changes.append((live.pop(id_), -1))
                if rng.random() < 0.5:
                    live[id_] = basket(rng, id_)
                    changes.append((live[id_], 1))
            for _ in range(rng.randrange(4, 8)):
                live[next_id] = basket(rng, next_id)
                changes.append((live[next_id], 1))
                next_id += 1
            append_changes(spark, rt, "baskets", BASKETS, changes, epoch)
            expected.append(plain_spark(spark, list(live.values())))
            epoch += 1
        assert rt.run().upper == epoch
    wrong = mismatches(rt, list(VIEWS), expected)
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT explode(items), explode(items) FROM baskets", "more than one generator"),
        ("SELECT posexplode(items) FROM baskets", "LATERAL VIEW posexplode"),
        ("SELECT id FROM baskets LATERAL VIEW OUTER stack(1, id) e AS x", "OUTER of this"),
    ],
)
def test_generators_spark_cannot_maintain_here_are_refused(
    spark: SparkSession, tmp_path: Path, sql: str, expected: str
) -> None:
    flow = Dataflow(spark, tmp_path / "warehouse")
    with pytest.raises(SqlError) as info:
        compile_view(flow, sql, {"baskets": flow.source("baskets", BASKETS)}, name="v")
    assert expected in str(info.value), str(info.value)
