"""Window functions equal DuckDB running the same SQL after every epoch: rows
move between partitions, order keys change and tie, a partition's top row is
deleted and a partition is emptied; one run of one epoch and one of three."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from dd_etl.plan import Collection, Dataflow
from dd_etl.plan import nodes as n
from dd_etl.plan.sql import SqlError, compile_view, explain
from tests.support.sql_oracle import Row, duckdb_views, epochs_against_duckdb

pytestmark = pytest.mark.spark

ORDERS = StructType(
    [
        StructField("id", LongType()),
        StructField("customer", LongType()),
        StructField("amount", DoubleType()),
        StructField("ts", LongType()),
        StructField("status", StringType()),
    ]
)
DUCKDB_TABLE = "id BIGINT, customer BIGINT, amount DOUBLE, ts BIGINT, status VARCHAR"

# DuckDB SQL; ids are unique, so an order ending in id is total
VIEWS: dict[str, str] = {
    "latest": "SELECT id, customer, amount FROM orders "
    "QUALIFY ROW_NUMBER() OVER (PARTITION BY customer ORDER BY ts DESC, id) = 1",
    "latest_two": "SELECT * FROM (SELECT id, customer, ts, "
    "ROW_NUMBER() OVER (PARTITION BY customer ORDER BY ts DESC, id) AS rn FROM orders) "
    "WHERE rn <= 2",
    "second": "SELECT id, customer FROM orders "
    "QUALIFY ROW_NUMBER() OVER (PARTITION BY customer ORDER BY ts, id) = 2",
    "top_ranked": "SELECT id, customer, amount FROM orders "
    "QUALIFY RANK() OVER (PARTITION BY customer ORDER BY amount DESC NULLS LAST) <= 2",
    "dense_top": "SELECT * FROM (SELECT id, status, amount, DENSE_RANK() OVER "
    "(PARTITION BY status ORDER BY amount NULLS FIRST) AS dr FROM orders) WHERE dr < 3",
    "tied_top": "SELECT id, amount FROM orders ORDER BY amount DESC NULLS LAST "
    "FETCH FIRST 3 ROWS WITH TIES",
    "ranks": "SELECT id, RANK() OVER (PARTITION BY customer ORDER BY amount DESC) AS r, "
    "DENSE_RANK() OVER (PARTITION BY customer ORDER BY amount DESC) AS dr, "
    "PERCENT_RANK() OVER (PARTITION BY customer ORDER BY amount) AS pr FROM orders",
    "neighbours": "SELECT id, LAG(amount) OVER (PARTITION BY customer ORDER BY ts, id) AS prev, "
    "LEAD(amount, 2, -1.0) OVER (PARTITION BY customer ORDER BY ts, id) AS after_next, "
    "NTILE(2) OVER (PARTITION BY customer ORDER BY ts, id) AS half FROM orders",
    "running": "SELECT id, SUM(amount) OVER (PARTITION BY customer ORDER BY ts, id "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run, "
    "COUNT(amount) OVER (PARTITION BY customer ORDER BY ts "
    "RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) AS recent, "
    "MAX(amount) OVER (PARTITION BY customer ORDER BY ts) AS peak FROM orders",
    "ends": "SELECT id, FIRST_VALUE(amount) OVER (PARTITION BY customer ORDER BY ts, id) AS first, "
    "LAST_VALUE(amount) OVER (PARTITION BY customer ORDER BY ts, id "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last FROM orders",
    "whole": "SELECT id, COUNT(*) OVER () AS n, "
    "ROW_NUMBER() OVER (ORDER BY amount DESC NULLS LAST, id) AS pos FROM orders",
    "grouped": "SELECT customer, SUM(amount) AS total, "
    "RANK() OVER (ORDER BY COUNT(*) DESC) AS by_count FROM orders GROUP BY customer",
    "named": "SELECT id, SUM(amount) OVER w AS s, COUNT(*) OVER (w ORDER BY ts, id) AS c "
    "FROM orders WINDOW w AS (PARTITION BY status)",
    "computed_partition": "SELECT DISTINCT customer % 2 AS parity, status, "
    "COUNT(*) OVER (PARTITION BY customer % 2, status) AS n FROM orders",
}


REFERENCE = {
    "tied_top": "SELECT id, amount FROM orders "
    "QUALIFY RANK() OVER (ORDER BY amount DESC NULLS LAST) <= 3",
}
"""What DuckDB runs for the views it has no syntax for."""


def order(rng: random.Random, id_: int) -> Row:
    return (
        id_,
        rng.choice([1, 2, 3, None]),
        rng.choice([5.0, 12.5, 20.0, None]),
        rng.randrange(5),
        rng.choice(["new", "paid"]),
    )


def epoch_changes(
    rng: random.Random, live: dict[int, Row], next_id: int, epoch: int
) -> tuple[list[tuple[Row, int]], int]:
    """Inserts, updates (a new customer, time or amount) and deletes; epoch 2
    deletes the top row of customer 1's partition and empties customer 2's."""
    changes: list[tuple[Row, int]] = []

    def remove(id_: int) -> None:
        changes.append((live.pop(id_), -1))

    def put(row: Row) -> None:
        live[row[0]] = row
        changes.append((row, 1))

    for _ in range(rng.randrange(3, 8)):
        put(order(rng, next_id))
        next_id += 1
    for id_ in rng.sample(sorted(live), k=min(len(live), 3)):
        old = live[id_]
        remove(id_)
        put((id_, *order(rng, id_)[1:3], old[3], old[4]) if rng.random() < 0.5 else order(rng, id_))
    if epoch == 2:
        ones = [r for r in live.values() if r[1] == 1]
        if ones:
            remove(max(ones, key=lambda r: (r[3], -r[0]))[0])
        for row in [r for r in live.values() if r[1] == 2]:
            remove(row[0])
    elif live:
        remove(rng.choice(sorted(live)))
    return changes, next_id


def test_window_views_equal_duckdb_after_every_epoch(spark: SparkSession, tmp_path: Path) -> None:
    rt = duckdb_views(spark, tmp_path / "warehouse", "orders", ORDERS, VIEWS)
    changes = functools.partial(epoch_changes, random.Random(5))
    views = VIEWS | REFERENCE
    wrong = epochs_against_duckdb(spark, rt, "orders", ORDERS, DUCKDB_TABLE, (1, 3), changes, views)
    assert not wrong, wrong


def _compiled(spark: SparkSession, warehouse: Path, sql: str) -> Collection:
    flow = Dataflow(spark, warehouse)
    return compile_view(
        flow, sql, {"orders": flow.source("orders", ORDERS)}, name="v", dialect="duckdb"
    )


def test_explain_shows_the_partition_and_a_single_partition_costs(
    spark: SparkSession, tmp_path: Path
) -> None:
    partitioned = explain(_compiled(spark, tmp_path, VIEWS["latest_two"]))
    assert "reduce window" in partitioned and "ROW_NUMBER() OVER (ORDER BY" in partitioned
    assert "per (customer" in partitioned and "not incremental" not in partitioned
    whole = explain(_compiled(spark, tmp_path, VIEWS["whole"]))
    assert "[not incremental: one partition" in whole


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT id FROM orders WHERE ROW_NUMBER() OVER (ORDER BY id) = 1", "QUALIFY"),
        ("SELECT SUM(ROW_NUMBER() OVER (ORDER BY id)) OVER () FROM orders", "inside a window"),
        ("SELECT RANK() OVER (PARTITION BY customer) FROM orders", "Spark cannot evaluate"),
        ("SELECT SUM(amount) OVER w FROM orders WINDOW v AS (ORDER BY ts)", "unknown window"),
        ("SELECT SUM(amount) OVER w FROM orders", "unknown window"),
    ],
)
def test_misplaced_window_calls_are_located(
    spark: SparkSession, tmp_path: Path, sql: str, expected: str
) -> None:
    with pytest.raises(SqlError) as info:
        _compiled(spark, tmp_path, sql)
    assert expected in str(info.value) and "line 1, col" in str(info.value), str(info.value)


def test_a_row_number_bound_keeps_the_first_rows_before_the_window(
    spark: SparkSession, tmp_path: Path
) -> None:
    """QUALIFY and an outer WHERE alike: ``= 1`` keeps each partition's least
    row as MIN/MAX are kept (one reduction per partition, its order's ``id``
    reversed to lead the same way as ``ts DESC``) and needs no window; ``<= 2``,
    ``= 2`` and a RANK or DENSE_RANK bound number the rows a top-k of the
    partition kept (buckets, then their top rows, ties kept for a rank), not
    the partition."""
    first = explain(_compiled(spark, tmp_path, VIEWS["latest"]))
    reductions = [line for line in first.splitlines() if "reduce " in line]
    assert len(reductions) == 1, first
    assert "reduce min_max first row (max by its order" in reductions[0], first
    for name in ("latest_two", "second", "top_ranked", "dense_top"):
        text = explain(_compiled(spark, tmp_path, VIEWS[name]))
        top = [line for line in text.splitlines() if "reduce top_k" in line]
        assert len(top) == 2 and ", __bucket)" in top[1], text
        assert text.index("reduce window") < text.index("reduce top_k"), text


def test_a_first_row_leads_with_reversed_values_or_takes_the_top_k(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An order mixing directions keeps the one-reduction first row where the
    values against the lead direction reverse exactly, and the hierarchical
    top-k where they do not (a string)."""
    flow = Dataflow(spark, tmp_path)
    orders = flow.source("orders", ORDERS)
    kept = orders.first_row(["customer"], [("ts", True), "id"])
    reduction = kept.node.inputs[0]
    assert isinstance(reduction, n.Reduce) and reduction.kind == "min_max"
    assert kept.columns == orders.columns
    by_status = orders.first_row(["customer"], [("ts", True), "status"]).node
    assert isinstance(by_status, n.Reduce) and by_status.kind == "top_k"
