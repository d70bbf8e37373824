"""Multi-way joins as delta queries: equal to DuckDB's NATURAL JOIN after every
epoch, and no trace of any intermediate result."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.operators.delta_query import Lookup, lookup_orders
from dd_etl.plan import Dataflow
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import PlanError
from dd_etl.runtime import Runtime
from dd_etl.runtime.recompute import recompute

RELATIONS = {"r": ("a", "x"), "s": ("x", "y"), "t": ("y", "z"), "u": ("x", "w")}


def test_lookup_orders_follow_shared_columns() -> None:
    orders = lookup_orders([("a", "x"), ("x", "y"), ("y", "z")])
    assert orders[0] == (Lookup(1, ("x",)), Lookup(2, ("y",)))
    assert orders[2] == (Lookup(1, ("y",)), Lookup(0, ("x",)))
    with pytest.raises(ValueError, match="share no column"):
        lookup_orders([("a",), ("b",)])


@pytest.mark.spark
def test_four_way_join_equals_duckdb(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    schemas = {
        name: StructType([StructField(c, LongType()) for c in cols])
        for name, cols in RELATIONS.items()
    }
    rel = {name: flow.source(name, schema) for name, schema in schemas.items()}
    flow.view("joined", rel["r"].join_all(rel["s"], rel["t"], rel["u"]))
    with pytest.raises(PlanError, match="share no column"):
        rel["r"].join_all(rel["t"])
    rt = Runtime(flow)
    arranged = [x for x in rt.stateful_nodes() if isinstance(x, n.Arrange)]
    assert all(isinstance(x.inputs[0], n.Source) for x in arranged), "no intermediate traces"

    rng = random.Random(5)
    live: dict[str, Counter[tuple[Any, ...]]] = {name: Counter() for name in RELATIONS}
    history = []
    epoch = 0
    for epochs_in_run in (2, 2):
        for _ in range(epochs_in_run):
            for name, schema in schemas.items():
                changes = [
                    ((rng.choice([0, 1, 1, None]), rng.choice([0, 1, 1, None])), 1)
                    for _ in range(rng.randrange(1, 6))
                ]
                changes += [
                    (r, -1)
                    for r in rng.sample(sorted(+live[name], key=str), k=min(1, len(+live[name])))
                ]
                full = StructType([*schema.fields, StructField("_diff", LongType())])
                rt.append_source(
                    name, spark.createDataFrame([(*r, d) for r, d in changes], full), epoch
                )
                for r, d in changes:
                    live[name][r] += d
            history.append({name: +rows for name, rows in live.items()})
            epoch += 1
        rt.run()

    con = duckdb.connect()
    matched = 0
    for e, tables in enumerate(history):
        for name, cols in RELATIONS.items():
            con.execute(f"CREATE OR REPLACE TABLE {name} ({cols[0]} BIGINT, {cols[1]} BIGINT)")
            if tables[name]:
                con.executemany(f"INSERT INTO {name} VALUES (?, ?)", list(tables[name].elements()))
        sql = "SELECT a, x, y, z, w FROM r NATURAL JOIN s NATURAL JOIN t NATURAL JOIN u"
        expected = Counter(tuple(r) for r in con.execute(sql).fetchall())
        assert Counter(tuple(r) for r in rt.read("joined", e).collect()) == expected, e
        matched += expected.total()
    assert matched > 5, "the random data must make the join produce rows"
    scratch = recompute(rt, "joined", epoch - 1).collect()
    assert Counter({tuple(r)[:-1]: r["_diff"] for r in scratch}) == expected
