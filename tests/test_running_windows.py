"""Running aggregates over an ordered partition (``operators/running.py``) equal
DuckDB after every epoch. The epochs mostly append rows after their partition's
last one, the case kept from the partition's totals; some rows tie with the
last, arrive late, are updated or deleted, have a NULL order or value, or open
a partition, and take the window rule."""

from __future__ import annotations

import functools
import random
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dd_etl.operators import running
from dd_etl.operators.extremes import order_struct
from dd_etl.operators.running import delta_running, out_of_order, running_calls
from dd_etl.plan import Dataflow
from dd_etl.plan import nodes as n
from dd_etl.plan.sql import compile_view, explain
from dd_etl.trace.columns import DIFF, KEY_HASH
from tests.support.sql_oracle import Row, duckdb_views, epochs_against_duckdb

pytestmark = pytest.mark.spark

EVENTS = StructType(
    [
        StructField("id", LongType()),
        StructField("account", StringType()),
        StructField("ts", LongType()),
        StructField("units", LongType()),
        StructField("price", DecimalType(10, 2)),
        StructField("weight", DoubleType()),
    ]
)
DUCKDB_TABLE = (
    "id BIGINT, account VARCHAR, ts BIGINT, units BIGINT, price DECIMAL(10, 2), weight DOUBLE"
)

VIEWS: dict[str, str] = {
    # the default frame: RANGE, rows of one ts are peers
    "cumulative": "SELECT id, account, "
    "SUM(units) OVER (PARTITION BY account ORDER BY ts) AS units_so_far, "
    "COUNT(*) OVER (PARTITION BY account ORDER BY ts) AS seen, "
    "ROW_NUMBER() OVER (PARTITION BY account ORDER BY ts, id) AS nth, "
    "LAG(id) OVER (PARTITION BY account ORDER BY ts, id) AS before FROM events",
    "latest_first": "SELECT id, "
    "SUM(price) OVER (PARTITION BY account ORDER BY ts DESC, id DESC "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS spent, "
    "COUNT(weight) OVER (PARTITION BY account ORDER BY ts DESC, id DESC "
    "ROWS UNBOUNDED PRECEDING) AS weighed FROM events",
    "mixed": "SELECT id, SUM(weight) OVER (PARTITION BY account ORDER BY ts, id DESC "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS load FROM events",
}


def event(rng: random.Random, id_: int, account: str, ts: int | None) -> Row:
    return (
        id_,
        account,
        ts,
        rng.choice([1, 2, 5, None]),
        rng.choice([Decimal("1.50"), Decimal("10.00"), None]),
        rng.choice([0.5, 2.25, None]),
    )


def epoch_changes(
    rng: random.Random, live: dict[int, Row], next_id: int, epoch: int
) -> tuple[list[tuple[Row, int]], int]:
    """Appends after each account's last row; now and then a tie with it, a late
    row, a NULL order, an update, a delete and a new account."""
    changes: list[tuple[Row, int]] = []
    accounts = ["a", "b", "c", "d"] + [f"new{epoch}"] * (epoch % 2)
    for account in accounts:
        for _ in range(rng.randrange(1, 4)):
            changes.append((event(rng, next_id, account, 10 * epoch + rng.randrange(10)), 1))
            next_id += 1
    if epoch > 0:
        late = rng.choice(["a", "b"])
        odd = [10 * epoch - 10, 10 * epoch - 1, None][epoch % 3]  # late, tied or NULL
        changes.append((event(rng, next_id, late, odd), 1))
        next_id += 1
        old = rng.choice(sorted(live))
        changes += [(live[old], -1), ((*live[old][:3], 7, Decimal("3.00"), 1.0), 1)]
        gone = rng.choice([i for i in sorted(live) if i != old])
        changes.append((live[gone], -1))
    for row, diff in changes:
        if diff > 0:
            live[row[0]] = row
        elif live.get(row[0]) == row:
            del live[row[0]]
    return changes, next_id


def test_running_views_equal_duckdb_after_every_epoch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    told: list[tuple[int, int]] = []  # (partitions changed, of them out of order)
    tell = running.out_of_order

    def spied(changes: pa.Table, *args: Any) -> pa.Table | None:
        hit = tell(changes, *args)
        if hit is not None:
            touched = changes.group_by([KEY_HASH]).aggregate([]).num_rows
            told.append((touched, hit.num_rows))
        return hit

    monkeypatch.setattr(running, "out_of_order", spied)
    rt = duckdb_views(spark, tmp_path / "warehouse", "events", EVENTS, VIEWS)
    changes = functools.partial(epoch_changes, random.Random(11))
    runs = (1, 1, 1, 2, 1)  # one epoch a run is the running rule's case
    wrong = epochs_against_duckdb(spark, rt, "events", EVENTS, DUCKDB_TABLE, runs, changes, VIEWS)
    assert not wrong, wrong
    # the driver told both kinds of partitions apart, in the runs of one epoch
    assert any(hit < touched for touched, hit in told), told
    assert any(hit > 0 for _, hit in told), told


def test_running_calls_take_their_own_reduction(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    events = flow.source("events", EVENTS, key=["id"])
    view = compile_view(flow, VIEWS["cumulative"], {"events": events}, name="v", dialect="duckdb")
    kinds = Counter(x.kind for x in _reductions(view.node))
    # a running reduction per order, LAG by the window rule, and the last rows
    assert (kinds["running"], kinds["window"], kinds["min_max"]) == (2, 1, 2)
    assert "running" in explain(view)
    general = {
        "lag": "LAG(units) OVER (PARTITION BY account ORDER BY ts)",
        "moving": "SUM(units) OVER (PARTITION BY account ORDER BY ts "
        "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
        "by_expression": "SUM(units) OVER (PARTITION BY account ORDER BY ts + 1)",
        "float_order_reversed": "SUM(units) OVER (PARTITION BY account ORDER BY ts, weight DESC)",
        "one_partition": "SUM(units) OVER (ORDER BY ts)",
        "average": "AVG(units) OVER (PARTITION BY account ORDER BY ts)",
    }
    for name, calls in general.items():
        sql = f"SELECT id, {calls} FROM events"
        compiled = compile_view(flow, sql, {"events": events}, name=name, dialect="duckdb")
        assert "running" not in [x.kind for x in _reductions(compiled.node)], name


def _reductions(node: n.Node) -> list[n.Reduce]:
    """The reductions ``node`` reads, each once."""
    found: dict[str, n.Reduce] = {}

    def visit(x: n.Node) -> None:
        if isinstance(x, n.Reduce):
            found[x.id] = x
        for i in x.inputs:
            visit(i)

    visit(node)
    return list(found.values())


def test_only_out_of_order_partitions_reach_the_window_rule(spark: SparkSession) -> None:
    """Of four touched partitions, the one with a retraction, the one with a row
    tied with its last and the one with a row before it go to the window rule,
    with all their changes; the one appending after its last row does not."""
    schema = StructType([EVENTS["id"], EVENTS["account"], EVENTS["ts"], EVENTS["units"]])
    running = running_calls(
        [("s", "sum(`units`) OVER (ORDER BY `ts` ASC NULLS FIRST)")], schema, ["account"]
    )
    assert running is not None
    changes = spark.createDataFrame(
        [
            (1, "appends", 11, 1, 5, 1),
            (2, "appends", 12, 1, 5, 1),
            (3, "retracts", 11, 1, 5, -1),
            (4, "ties", 10, 1, 5, 1),
            (5, "late", 3, 1, 5, 1),
            (6, "late", 30, 1, 5, 1),
        ],
        "id BIGINT, account STRING, ts BIGINT, units BIGINT, _time BIGINT, _diff BIGINT",
    )
    lasts = spark.createDataFrame(
        [(a, (10,), 1) for a in ("appends", "retracts", "ties", "late")],
        "account STRING, __max STRUCT<ts: BIGINT>, _diff BIGINT",
    )
    totals = spark.createDataFrame(
        [("appends", 3, 3, 40, 1)],
        "account STRING, __rows BIGINT, __nn_units BIGINT, __sum_units BIGINT, _diff BIGINT",
    )
    reached: list[DataFrame] = []

    def general(rest: DataFrame) -> DataFrame:
        reached.append(rest)
        return spark.createDataFrame(
            [],
            "id BIGINT, account STRING, ts BIGINT, "
            "units BIGINT, s BIGINT, _time BIGINT, _diff BIGINT",
        )

    out = delta_running(
        changes,
        None,
        lambda keys: lasts.join(keys, "account"),
        lambda keys: totals.join(keys, "account"),
        general,
        ["account"],
        running,
        order_struct(running.order, schema) or [],
        StructType([*schema.fields, StructField("s", LongType())]),
    )
    rows = sorted(tuple(r) for r in out.collect())
    assert rows == [(1, "appends", 11, 1, 41, 5, 1), (2, "appends", 12, 1, 42, 5, 1)]
    (rest,) = reached
    assert sorted(r["id"] for r in rest.collect()) == [3, 4, 5, 6]


def _hash(account: str) -> int:
    """A key hash of its own for each account."""
    return sum(ord(c) * 31**i for i, c in enumerate(account))


def test_the_driver_tells_the_out_of_order_partitions_from_stored_rows() -> None:
    """As Spark would (above): a retraction, a row tied with its partition's last
    and a row before it send their partition to the window rule; rows after the
    last, or in a partition with none, do not. Descending with NULLs first, a
    NULL is first and a row with a larger order is before the last."""
    schema = StructType([EVENTS["id"], EVENTS["account"], EVENTS["ts"], EVENTS["units"]])

    def told(text: str, rows: list[tuple[Any, ...]], lasts: list[tuple[str, Any]]) -> list[str]:
        running = running_calls([("s", text)], schema, ["account"])
        assert running is not None
        fields = order_struct(running.order, schema)
        assert fields is not None
        accounts = [r[0] for r in rows]
        changes = pa.table(
            {
                "account": accounts,
                "ts": [r[1] for r in rows],
                KEY_HASH: [_hash(a) for a in accounts],
                DIFF: [r[2] for r in rows],
            }
        )
        side = running.side
        last_rows = pa.table(
            {
                "account": [a for a, _ in lasts],
                side: [v for _, v in lasts],
                KEY_HASH: [_hash(a) for a, _ in lasts],
                DIFF: [1] * len(lasts),
            }
        )
        hit = out_of_order(changes, last_rows, ["account"], running, fields)
        assert hit is not None
        return sorted(hit.column("account").to_pylist())

    rows: list[tuple[Any, ...]] = [("appends", 11, 1), ("retracts", 11, -1), ("ties", 10, 1)]
    rows.append(("late", 3, 1))
    rows += [("late", 30, 1), ("fresh", 1, 1)]
    lasts = [(a, {"ts": 10}) for a in ("appends", "retracts", "ties", "late")]
    ascending = "sum(`units`) OVER (ORDER BY `ts` ASC NULLS FIRST)"
    assert told(ascending, rows, lasts) == ["late", "retracts", "ties"]
    descending = "sum(`units`) OVER (ORDER BY `ts` DESC NULLS FIRST)"
    rows = [("earlier", 9, 1), ("later", 12, 1), ("null", None, 1)]
    lasts = [(a, {"__null0": False, "ts": 10}) for a in ("earlier", "later", "null")]
    assert told(descending, rows, lasts) == ["later", "null"]
