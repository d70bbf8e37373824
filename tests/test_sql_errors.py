"""Compile errors of SQL views, found before any Spark work: they name the view,
the line and column in its SQL, and quote the offending construct."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from dd_etl.plan import Collection, Dataflow
from dd_etl.plan.dataflow import PlanError
from dd_etl.plan.sql import SqlError, compile_view

TRIPS = StructType(
    [
        StructField("id", LongType()),
        StructField("pc", LongType()),
        StructField("fare", DoubleType()),
    ]
)
ZONES = StructType([StructField("pc", LongType()), StructField("label", StringType())])


@pytest.fixture
def tables(tmp_path: Path) -> dict[str, Collection]:
    # No SparkSession: these errors must be raised before Spark is needed.
    flow = Dataflow(cast(Any, None), tmp_path)
    return {"trips": flow.source("trips", TRIPS, key=["id"]), "zones": flow.source("zones", ZONES)}


def error(tables: dict[str, Collection], sql: str, dialect: str = "duckdb") -> SqlError:
    flow = next(iter(tables.values())).flow
    with pytest.raises(SqlError) as info:
        compile_view(flow, sql, tables, name="my_view", dialect=dialect)
    return info.value


def test_unknown_column_gives_its_position_and_the_construct(
    tables: dict[str, Collection],
) -> None:
    e = error(tables, "SELECT pc,\n       SUM(fares) AS total\nFROM trips GROUP BY pc")
    assert str(e) == "view my_view, line 2, col 12: unknown column 'fares' in \"SUM(fares)\""
    assert (e.line, e.col) == (2, 12)
    assert isinstance(e, PlanError)


def test_unknown_qualified_column(tables: dict[str, Collection]) -> None:
    e = error(tables, "SELECT t.id FROM trips t JOIN zones z ON t.pc = z.zone")
    assert "line 1, col 49: unknown column 'z.zone'" in str(e)
    assert '"t.pc = z.zone"' in str(e)


def test_unknown_table_lists_the_known_ones(tables: dict[str, Collection]) -> None:
    e = error(tables, "SELECT *\nFROM trips JOIN fares ON trips.id = fares.id")
    assert str(e).startswith("view my_view, line 2, col 17: unknown table 'fares'")
    assert "tables: trips, zones" in str(e)


def test_a_cte_is_a_table_inside_its_query(tables: dict[str, Collection]) -> None:
    e = error(tables, "WITH c AS (SELECT id FROM trips) SELECT c.fare FROM c")
    assert "unknown column 'c.fare'" in str(e)


def test_recursive_ctes_must_be_linear(tables: dict[str, Collection]) -> None:
    twice = error(
        tables,
        "WITH RECURSIVE r(id) AS (SELECT id FROM trips UNION\n"
        "  SELECT a.id FROM r a JOIN r b ON a.id = b.id)\nSELECT id FROM r",
    )
    assert "the step of recursive CTE 'r' (after UNION) must read 'r' exactly once" in str(twice)
    assert twice.line == 2
    shape = error(
        tables, "WITH RECURSIVE r(id) AS (SELECT id FROM trips EXCEPT SELECT id FROM r) TABLE r"
    )
    assert "recursive CTE 'r' must be `base UNION [ALL] step`" in str(shape)


def test_parse_errors_have_a_position(tables: dict[str, Collection]) -> None:
    e = error(tables, "SELECT id FROM trips WHERE\n  pc = = 1")
    assert str(e).startswith("view my_view, line 2")
    assert "cannot parse" in str(e)


def test_a_view_is_one_query(tables: dict[str, Collection]) -> None:
    assert "one SELECT query" in str(error(tables, "SELECT 1; SELECT 2"))
    assert "one SELECT query" in str(error(tables, "INSERT INTO trips VALUES (1, 2, 3.0)"))


def test_ambiguous_column(tables: dict[str, Collection]) -> None:
    e = error(tables, "SELECT pc FROM trips, zones")
    assert "col 8" in str(e) and "'pc'" in str(e)
