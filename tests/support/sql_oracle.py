"""DuckDB as the oracle of SQL views: the same SQL on the same data, epoch by
epoch, compared with a view's change feed accumulated up to each epoch.

Rows are compared as bags; floats are rounded, as the two engines may add
them up in different orders.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.plan.sql import compile_view
from dd_etl.runtime import Runtime

Row = tuple[Any, ...]
Bags = dict[str, Counter[Row]]


def norm(row: Row) -> Row:
    """Floats rounded; lists (arrays) as tuples, so rows can be counted."""
    return tuple(_value(v) for v in row)


def _value(v: Any) -> Any:
    if isinstance(v, float) and not math.isnan(v):
        return round(v, 6)
    if isinstance(v, list):
        return tuple(_value(x) for x in v)
    return v


def append_changes(
    spark: SparkSession,
    rt: Runtime,
    source: str,
    schema: StructType,
    changes: Sequence[tuple[Row, int]],
    epoch: int,
) -> None:
    """``(row, diff)`` pairs as the source's changes at ``epoch``."""
    full = StructType([*schema.fields, StructField("_diff", LongType())])
    rt.append_source(source, spark.createDataFrame([(*r, d) for r, d in changes], full), epoch)


def duckdb_results(
    history: Sequence[Mapping[str, Counter[Row]]],
    ddl: Mapping[str, str],
    views: Mapping[str, str],
) -> list[Bags]:
    """Each view's rows (DuckDB-dialect SQL, views in dependency order) on the
    tables as they were after each epoch of ``history``."""
    con = duckdb.connect()
    results = []
    for tables in history:
        for name, bag in tables.items():
            con.execute(f"CREATE OR REPLACE TABLE {name} ({ddl[name]})")
            if bag:
                marks = ", ".join("?" * len(next(iter(bag))))
                con.executemany(f"INSERT INTO {name} VALUES ({marks})", list(bag.elements()))
        for name, sql in views.items():
            con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {sql}')
        results.append(
            {
                name: Counter(
                    norm(tuple(r)) for r in con.execute(f'SELECT * FROM "{name}"').fetchall()
                )
                for name in views
            }
        )
    con.close()
    return results


def mismatches(
    rt: Runtime, views: Sequence[str], expected: Sequence[Bags]
) -> list[tuple[str, int, Counter[Row], Counter[Row]]]:
    """``(view, epoch, ours, expected)`` wherever a view's changes accumulated up
    to an epoch differ from the expected rows; each feed is read once."""
    wrong = []
    for name in views:
        feed = rt.changes(name, 0, len(expected)).collect()
        for e, bags in enumerate(expected):
            ours: Counter[Row] = Counter()
            for r in feed:
                if r["_time"] <= e:
                    ours[norm(tuple(r)[:-2])] += r["_diff"]
            if ours != bags[name]:
                wrong.append((name, e, ours, bags[name]))
    return wrong


Changes = Callable[[dict[int, Row], int, int], tuple[list[tuple[Row, int]], int]]
"""``(live rows by id, next id, epoch)`` to the epoch's ``(row, diff)`` pairs
(``live`` updated) and the next id."""


def duckdb_views(
    spark: SparkSession, warehouse: Path, table: str, schema: StructType, views: Mapping[str, str]
) -> Runtime:
    """DuckDB-dialect ``views`` over one source ``table`` keyed by ``id``."""
    flow = Dataflow(spark, warehouse)
    tables = {table: flow.source(table, schema, key=["id"])}
    for name, sql in views.items():
        compile_view(flow, sql, tables, name=name, dialect="duckdb")
    return Runtime(flow)


def epochs_against_duckdb(
    spark: SparkSession,
    rt: Runtime,
    table: str,
    schema: StructType,
    ddl: str,
    runs: Sequence[int],
    changes: Changes,
    views: Mapping[str, str],
) -> list[tuple[str, int, Counter[Row], Counter[Row]]]:
    """Runs of ``runs[i]`` epochs of ``changes`` each, then ``mismatches`` of the
    runtime's views against DuckDB running ``views`` (the runtime's, and the
    SQL DuckDB runs for those it has no syntax for) after every epoch."""
    live: dict[int, Row] = {}
    history: list[dict[str, Counter[Row]]] = []
    next_id, epoch = 0, 0
    for epochs_in_run in runs:
        for _ in range(epochs_in_run):
            rows, next_id = changes(live, next_id, epoch)
            append_changes(spark, rt, table, schema, rows, epoch)
            history.append({table: Counter(live.values())})
            epoch += 1
        assert rt.run().upper == epoch
    names = list(rt.flow.views)
    return mismatches(rt, names, duckdb_results(history, {table: ddl}, views))
