"""SQL views compiled to differential dataflows equal DuckDB running the same SQL
on the same data, after every epoch (bag semantics, SQL NULL rules).

One dataflow holds the whole corpus, so each run computes every view at once;
random inserts and deletes (duplicates, NULLs, rows inserted and deleted in the
same epoch, emptied tables) arrive over four epochs in two runs. Each view's
change feed is read once and accumulated per epoch.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dd_etl.lake import Location, StoreOptions, Where
from dd_etl.plan import Collection, Dataflow
from dd_etl.plan.sql import SqlError, compile_view, explain
from dd_etl.plan.sql.grouping import grouping_sets
from dd_etl.runtime import Runtime
from tests.support.s3_server import S3Server
from tests.support.sql_oracle import Row, append_changes, duckdb_results, mismatches

pytestmark = pytest.mark.spark

TRIPS = StructType(
    [
        StructField("id", LongType()),
        StructField("pc", LongType()),
        StructField("fare", DoubleType()),
        StructField("tag", StringType()),
        StructField("day", DateType()),
    ]
)
ZONES = StructType([StructField("pc", LongType()), StructField("label", StringType())])
DUCKDB_TABLES = {
    "trips": "id BIGINT, pc BIGINT, fare DOUBLE, tag VARCHAR, day DATE",
    "zones": "pc BIGINT, label VARCHAR",
}

# name -> SQL (DuckDB dialect unless the name ends in _spark), in dependency order
VIEWS: dict[str, str] = {
    # projections and scalar functions
    "scalar": "SELECT id, fare * 2 + 1 AS f2, "
    "CASE WHEN fare > 10 THEN 'hi' WHEN fare IS NULL THEN 'none' ELSE 'lo' END AS band, "
    "COALESCE(tag, 'none') AS tag2, "
    "UPPER(tag) || '-' || SUBSTRING(COALESCE(tag, 'xy'), 1, 1) AS ut, "
    "LENGTH(tag) AS lt, CAST(pc AS VARCHAR) AS spc, "
    "CAST(day + INTERVAL 1 DAY AS DATE) AS next_day, "
    "EXTRACT(MONTH FROM day) AS m FROM trips WHERE pc IS NOT NULL OR fare > 5",
    "scalar_spark": "SELECT id, nvl(tag, 'n') AS t2, if(fare > 10, 1, 0) AS big, "
    "CAST(date_add(day, 1) AS DATE) AS d1 FROM trips WHERE tag IS NULL OR tag <> 'b'",
    "constant": "SELECT 1 AS one, 'x' AS s",
    "values": "SELECT v.x, v.y, t.id FROM (VALUES (1, 'a'), (2, NULL)) v(x, y) "
    "JOIN trips t ON t.pc = v.x",
    # joins
    "inner_join": "SELECT t.id, z.label FROM trips t JOIN zones z ON t.pc = z.pc",
    "comma": "SELECT t.id, z.label FROM trips t, zones z "
    "WHERE t.pc = z.pc AND t.fare > 5 AND z.label < t.tag",
    "left": "SELECT t.id, z.label FROM trips t LEFT JOIN zones z "
    "ON t.pc = z.pc AND z.label <> 'two' AND t.fare > 5",
    "full_using": "SELECT pc, a.id, zones.label FROM (SELECT pc, id FROM trips) a "
    "FULL JOIN zones USING (pc)",
    "cross": "SELECT z1.label, z2.label AS l2 FROM zones z1 CROSS JOIN zones z2 "
    "WHERE z1.pc < z2.pc",
    "null_safe": "SELECT a.id, b.id AS id2 FROM trips a JOIN trips b "
    "ON a.pc IS NOT DISTINCT FROM b.pc AND a.tag = b.tag",
    # aggregates
    "grouped": "SELECT pc, COUNT(*) AS n, COUNT(fare) AS nf, SUM(fare) AS s, AVG(fare) AS a, "
    "MAX(fare) AS mx FROM trips GROUP BY pc",
    "having": "SELECT pc % 2 AS parity, COUNT(DISTINCT fare) AS fares, SUM(DISTINCT pc) AS sp "
    "FROM trips GROUP BY pc % 2 HAVING COUNT(*) >= 2",
    "global": "SELECT COUNT(*) AS n, SUM(fare) AS s, AVG(pc) AS a FROM trips WHERE fare > 15",
    "filtered": "SELECT COUNT(*) FILTER (WHERE fare > 5) AS n, "
    "SUM(fare) FILTER (WHERE tag = 'a') AS s FROM trips",
    "distinct": "SELECT DISTINCT pc, tag FROM trips",
    # aggregates Spark evaluates over each touched group
    "calls_spark": "SELECT pc, collect_list(fare) AS fl, collect_set(tag) AS ts, "
    "percentile(fare, 0.5) AS p50, median(fare) AS med, "
    "percentile_cont(0.25) WITHIN GROUP (ORDER BY fare) AS q1, any_value(tag) AS anyt, "
    "approx_count_distinct(fare) AS acd, count(DISTINCT tag, day) AS pairs, "
    "stddev(fare) FILTER (WHERE id > 1) AS sd FROM trips GROUP BY pc",
    "global_calls_spark": "SELECT collect_set(pc) AS pcs, median(pc) AS med, "
    "count(DISTINCT pc, label) AS pairs FROM zones",
    # grouping sets
    "rollup": "SELECT pc, tag, COUNT(*) AS n, SUM(fare) AS s, GROUPING(pc) AS gp, "
    "GROUPING(pc, tag) AS g FROM trips GROUP BY ROLLUP (pc, tag)",
    "cube_spark": "SELECT pc, tag, grouping_id(pc, tag) AS g, MAX(fare) AS mx "
    "FROM trips GROUP BY CUBE(pc, tag)",
    "sets": "SELECT pc % 2 AS parity, tag, COUNT(*) AS n FROM trips "
    "GROUP BY GROUPING SETS ((pc % 2, tag), (tag), ()) HAVING COUNT(*) > 1",
    "rollup_crossed": "SELECT day, pc, COUNT(fare) AS n FROM trips GROUP BY day, ROLLUP (pc)",
    "rollup_empty": "SELECT label, COUNT(*) AS n FROM zones GROUP BY ROLLUP (label)",
    # set operations
    "union": "SELECT pc FROM trips UNION SELECT pc FROM zones",
    "union_all": "SELECT pc, tag AS x FROM trips UNION ALL SELECT pc, label FROM zones",
    "except_all": "SELECT pc FROM trips EXCEPT ALL SELECT pc FROM zones",
    "intersect_all": "SELECT pc FROM trips INTERSECT ALL SELECT pc FROM zones",
    "intersect": "SELECT tag FROM trips INTERSECT SELECT label FROM zones",
    # subqueries
    "in_corr": "SELECT id FROM trips t WHERE t.pc IN "
    "(SELECT z.pc FROM zones z WHERE z.label = t.tag AND z.label IS NOT NULL)",
    "not_exists": "SELECT id, pc FROM trips t "
    "WHERE NOT EXISTS (SELECT 1 FROM zones z WHERE z.pc = t.pc)",
    "not_in": "SELECT id FROM trips WHERE pc NOT IN (SELECT pc FROM zones)",
    "not_in_corr": "SELECT id FROM trips t WHERE t.pc NOT IN "
    "(SELECT z.pc FROM zones z WHERE z.label = t.tag)",
    "in_select": "SELECT id, pc IN (SELECT pc FROM zones) AS known FROM trips",
    "scalar_count": "SELECT id, (SELECT COUNT(*) FROM zones z WHERE z.pc = t.pc) AS n FROM trips t",
    "above_avg": "SELECT id FROM trips WHERE fare > (SELECT AVG(fare) FROM trips)",
    "exists_or": "SELECT id FROM trips t WHERE fare > 10 OR EXISTS "
    "(SELECT 1 FROM zones z WHERE z.pc = t.pc)",
    # correlated by an equality and another condition; NULL-safe correlation
    "exists_other": "SELECT id FROM trips t "
    "WHERE EXISTS (SELECT 1 FROM zones z WHERE z.label IS NOT DISTINCT FROM t.tag) "
    "AND t.pc IN (SELECT z.pc FROM zones z WHERE z.label = t.tag AND z.pc <> t.id) "
    "AND (fare > 15 OR NOT EXISTS (SELECT 1 FROM zones z WHERE z.pc = t.pc AND z.label <> t.tag))",
    "in_other": "SELECT id, pc IN "
    "(SELECT z.pc FROM zones z WHERE z.label = t.tag AND z.pc <> t.id) AS hit FROM trips t",
    # CTEs, ORDER BY ... LIMIT, views over views
    "cte": "WITH c AS (SELECT pc, COUNT(*) AS n FROM trips GROUP BY pc) "
    "SELECT a.pc, a.n, b.n AS n2 FROM c a JOIN c b ON a.pc = b.pc + 1",
    "top3": "SELECT id, fare FROM trips ORDER BY fare DESC NULLS LAST, id LIMIT 3",
    "offset": "SELECT pc, tag FROM trips ORDER BY pc NULLS FIRST, tag LIMIT 2 OFFSET 1",
    "over_view": "SELECT label, COUNT(*) AS n FROM inner_join GROUP BY label",
}


def dialect(name: str) -> str:
    return "spark" if name.endswith("_spark") else "duckdb"


def build(spark: SparkSession, warehouse: Where) -> Runtime:
    flow = Dataflow(spark, warehouse)
    tables: dict[str, Collection] = {
        "trips": flow.source("trips", TRIPS, key=["id"]),
        "zones": flow.source("zones", ZONES),
    }
    for name, sql in VIEWS.items():
        tables[name] = compile_view(flow, sql, tables, name=name, dialect=dialect(name))
    return Runtime(flow)


def random_changes(
    rng: random.Random, live: Counter[Row], make: Any, n: int
) -> list[tuple[Row, int]]:
    changes: list[tuple[Row, int]] = []
    for _ in range(rng.randrange(1, n)):
        row = make(rng)
        changes.append((row, 1))
        if rng.random() < 0.15:  # inserted and deleted in the same epoch
            changes.append((row, -1))
    rows = list((+live).elements())
    for row in rng.sample(rows, k=min(len(rows), rng.randrange(0, 4))):
        changes.append((row, -1))
    return changes


def trip(rng: random.Random) -> Row:
    return (
        rng.randrange(6),
        rng.choice([1, 2, 3, None]),
        rng.choice([5.0, 12.5, 20.0, None]),
        rng.choice(["a", "b", None]),
        rng.choice([dt.date(2024, 1, 31), dt.date(2024, 2, 29), None]),
    )


def zone(rng: random.Random) -> Row:
    return (rng.choice([1, 2, 3, 4, None]), rng.choice(["one", "two", "a", None]))


# DuckDB's spelling of views whose functions sqlglot does not translate; Spark's
# lists leave NULLs out, and SQL gives them no order (dd_etl sorts them)
ORACLE_SQL = {
    "calls_spark": "SELECT pc, "
    "COALESCE(list_sort(list(fare) FILTER (WHERE fare IS NOT NULL)), []) AS fl, "
    "COALESCE(list_sort(list(DISTINCT tag) FILTER (WHERE tag IS NOT NULL)), []) AS ts, "
    "quantile_cont(fare, 0.5) AS p50, median(fare) AS med, quantile_cont(fare, 0.25) AS q1, "
    "min(tag) AS anyt, count(DISTINCT fare) AS acd, "
    "count(DISTINCT CASE WHEN tag IS NOT NULL AND day IS NOT NULL THEN (tag, day) END) AS pairs, "
    "stddev_samp(fare) FILTER (WHERE id > 1) AS sd FROM trips GROUP BY pc",
    "global_calls_spark": "SELECT COALESCE(list_sort(list(DISTINCT pc) FILTER "
    "(WHERE pc IS NOT NULL)), []) AS pcs, median(pc) AS med, "
    "count(DISTINCT CASE WHEN pc IS NOT NULL AND label IS NOT NULL THEN (pc, label) END) "
    "AS pairs FROM zones",
}


def duckdb_sql(name: str, sql: str) -> str:
    if name in ORACLE_SQL:
        return ORACLE_SQL[name]
    return sql if dialect(name) == "duckdb" else sqlglot.transpile(sql, read=dialect(name))[0]


def test_sql_views_equal_duckdb_after_every_epoch(spark: SparkSession, s3_server: S3Server) -> None:
    """With the warehouse on S3: every trace and the Spark jobs writing and reading
    them go through the store."""
    rng = random.Random(11)
    options = StoreOptions.of(s3_server.storage_options())
    warehouse = Location.of(f"s3://{s3_server.bucket()}/warehouse", options)
    warehouse.configure(spark)
    rt = build(spark, warehouse)
    live = {"trips": Counter[Row](), "zones": Counter[Row]()}
    history: list[dict[str, Counter[Row]]] = []
    schemas = {"trips": TRIPS, "zones": ZONES}
    makers = {"trips": (trip, 8), "zones": (zone, 4)}
    epoch = 0
    for epochs_in_run in (2, 2):
        for _ in range(epochs_in_run):
            for source, bag in live.items():
                make, n = makers[source]
                changes = random_changes(rng, bag, make, n)
                if epoch == 2 and source == "zones":  # empty the table once
                    changes = [(r, -1) for r in (+bag).elements()]
                append_changes(spark, rt, source, schemas[source], changes, epoch)
                for r, d in changes:
                    bag[r] += d
            history.append({k: +v for k, v in live.items()})
            epoch += 1
        assert rt.run().upper == epoch

    views = {name: duckdb_sql(name, sql) for name, sql in VIEWS.items()}
    wrong = mismatches(rt, list(VIEWS), duckdb_results(history, DUCKDB_TABLES, views))
    assert not wrong, wrong


def explained(spark: SparkSession, warehouse: Path, sql: str, name: str) -> str:
    """``explain`` of ``sql`` compiled as the view ``name`` over trips and zones."""
    flow = Dataflow(spark, warehouse)
    trips = flow.source("trips", TRIPS, key=["id"])
    tables = {"trips": trips, "zones": flow.source("zones", ZONES)}
    return explain(compile_view(flow, sql, tables, name=name))


def test_explain_shows_traces_and_marks_cross_joins(spark: SparkSession, tmp_path: Path) -> None:
    text = explained(
        spark,
        tmp_path,
        "SELECT t.id, z.label FROM trips t JOIN zones z ON t.pc = z.pc "
        "WHERE t.fare > (SELECT AVG(fare) FROM trips)",
        "pricey",
    )
    assert text.splitlines()[0].startswith("view pricey")
    assert "trace views/pricey key (id, label)" in text
    assert "trace sources/trips key (id)" in text
    assert "[not incremental: cross join" in text
    assert "join (pc) = (pc_2)" in text or "join (pc" in text


def test_a_view_arranges_only_the_columns_it_reads(spark: SparkSession, tmp_path: Path) -> None:
    """The join's arrangement of trips holds its key and the summed fare, not the
    id, tag and day no clause reads: a lookup into it reads that much less."""
    sql = "SELECT z.label, SUM(t.fare) AS f FROM trips t JOIN zones z ON t.pc = z.pc GROUP BY 1"
    lines = explained(spark, tmp_path, sql, "fares_by_label").splitlines()
    arranged = [lines[i + 1] for i, line in enumerate(lines) if "arrange by (pc" in line]
    assert [line.strip("│└─ ").split("  #")[0] for line in arranged] == [
        "select pc, fare",
        "select pc_2 = pc, label",
    ]


UNSUPPORTED = {
    "SELECT id FROM trips WHERE RANK() OVER (ORDER BY id) = 1": (
        "line 1, col",
        "window function is not allowed here (filter by one with QUALIFY",
        "RANK()",
    ),
    "SELECT id, pc FROM trips GROUP BY id": ("col 12", "must appear in GROUP BY", "pc"),
    "SELECT t.id FROM trips t FULL JOIN zones z\n  ON t.pc < z.pc": (
        "line 2, col 6",
        "FULL JOIN over both inputs that is not an equality",
        "t.pc < z.pc",
    ),
    "SELECT id FROM trips t WHERE EXISTS (SELECT 1 FROM zones z WHERE z.pc < t.pc)": (
        "col 66",
        "correlated condition is not supported",
        "z.pc < t.pc",
    ),
    "SELECT id, (SELECT COUNT(*) FROM zones z\n  WHERE z.pc = t.pc AND z.label <> t.tag) AS n "
    "FROM trips t": ("line 2, col 25", "correlated condition is not supported", "z.label <> t.tag"),
    "SELECT GROUPING(tag), COUNT(*) FROM trips GROUP BY ROLLUP (pc)": (
        "line 1, col 8",
        "GROUPING of 'trips.tag', not a GROUP BY key",
        "GROUPING(trips.tag)",
    ),
    "SELECT id,\n  rand() AS r FROM trips": (
        "line 2, col 3",
        "random value is not deterministic",
        "RANDOM()",
    ),
    "SELECT id FROM trips WHERE day < CURRENT_DATE": (
        "line 1, col 34",
        "time of evaluation is not deterministic",
        "CURRENT_DATE",
    ),
    "SELECT id FROM trips LIMIT id": ("", "LIMIT or OFFSET that is not a number", "LIMIT trips.id"),
    "SELECT id,\n  no_such_function(fare) AS x FROM trips": (
        "line 2, col 3",
        "Spark cannot evaluate it",
        "NO_SUCH_FUNCTION(trips.fare)",
    ),
}


@pytest.mark.parametrize("sql", list(UNSUPPORTED))
def test_unsupported_constructs_are_quoted_with_their_position(
    spark: SparkSession, tmp_path: Path, sql: str
) -> None:
    flow = Dataflow(spark, tmp_path / "warehouse")
    tables = {
        "trips": flow.source("trips", TRIPS, key=["id"]),
        "zones": flow.source("zones", ZONES),
    }
    with pytest.raises(SqlError) as info:
        compile_view(flow, sql, tables, name="bad", dialect="duckdb")
    where, what, quoted = UNSUPPORTED[sql]
    message = str(info.value)
    assert message.startswith("view bad"), message
    assert where in message and what in message and quoted in message, message


@pytest.mark.parametrize(
    ("group_by", "expected"),
    [
        ("a, b", [["a", "b"]]),
        ("ROLLUP (a, b)", [["a", "b"], ["a"], []]),
        ("a, b WITH ROLLUP", [["a", "b"], ["a"], []]),
        ("CUBE (a, (b, c))", [["a", "b", "c"], ["a"], ["b", "c"], []]),
        ("GROUPING SETS ((a, b), a, ())", [["a", "b"], ["a"], []]),
        ("a, ROLLUP (b), CUBE (c)", [["a", "b", "c"], ["a", "b"], ["a", "c"], ["a"]]),
    ],
)
def test_grouping_sets_expand_as_sql_defines_them(group_by: str, expected: list[list[str]]) -> None:
    clause = sqlglot.parse_one(f"SELECT 1 FROM t GROUP BY {group_by}", read="spark").args["group"]
    assert [[e.sql() for e in s] for s in grouping_sets(clause)] == expected


def test_a_function_spark_marks_non_deterministic_is_refused_where_it_is_called(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A user function registered as non-deterministic, which no list of names
    can know: Spark's own flag refuses it, at the projection that calls it."""
    spark.udf.register("jitter", F.udf(lambda x: x, "long").asNondeterministic())
    flow = Dataflow(spark, tmp_path / "warehouse")
    trips = flow.source("trips", TRIPS, key=["id"])
    with pytest.raises(SqlError) as info:
        compile_view(flow, "SELECT id,\n  jitter(pc) AS j FROM trips", {"trips": trips}, name="v")
    message = str(info.value)
    assert "line 2, col 3" in message and "not deterministic" in message, message
