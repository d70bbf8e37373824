"""Per-view refresh policies: ``full`` recomputes, ``auto`` picks by the size of the
change, ``incremental`` never recomputes, and every view equals DuckDB at every
epoch whichever way it was brought up to date, including when ``auto`` switches
back to incremental after the sources were compacted."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from dd_etl.plan import Collection, Dataflow
from dd_etl.plan.refresh import RefreshPolicy, choose
from dd_etl.plan.sql import compile_view
from dd_etl.runtime import Runtime
from dd_etl.runtime.full_refresh import private_state
from dd_etl.trace.maintenance import maintain_warehouse
from tests.support.sql_oracle import Row, append_changes, duckdb_results, mismatches


def test_fixed_policies_ignore_sizes() -> None:
    assert choose("v", RefreshPolicy("full"), 1, 10**6, first_build=False).mode == "full"
    assert choose("v", RefreshPolicy("incremental"), 10**6, 1, first_build=False).mode == (
        "incremental"
    )


def test_auto_recomputes_only_above_its_threshold() -> None:
    auto = RefreshPolicy("auto", full_above=0.25)
    small = choose("v", auto, 25, 100, first_build=False)
    big = choose("v", auto, 26, 100, first_build=False)
    assert small.mode == "incremental" and big.mode == "full"
    assert "26 changed source records against 100, above the 25% threshold" in big.reason
    assert choose("v", auto, 10, 0, first_build=False).mode == "full", "no data held yet"
    first = choose("v", auto, 10**6, 1, first_build=True)
    assert first.mode == "incremental" and "first build" in first.reason


def test_policies_are_checked() -> None:
    with pytest.raises(ValueError, match="'sometimes' is not one of auto, incremental, full"):
        RefreshPolicy("sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positive"):
        RefreshPolicy("auto", full_above=0)


TRIPS = StructType(
    [
        StructField("id", LongType()),
        StructField("pc", LongType()),
        StructField("fare", DoubleType()),
    ]
)
ZONES = StructType([StructField("pc", LongType()), StructField("label", StringType())])
DUCKDB_TABLES = {"trips": "id BIGINT, pc BIGINT, fare DOUBLE", "zones": "pc BIGINT, label VARCHAR"}
JOINED = "FROM trips t JOIN zones z ON t.pc = z.pc GROUP BY z.label"
VIEWS: dict[str, tuple[str, RefreshPolicy]] = {
    "full_agg": (
        f"SELECT z.label, COUNT(*) AS n, SUM(t.fare) AS s, MIN(t.fare) AS lo {JOINED}",
        RefreshPolicy("full"),
    ),
    # shares the arrangements of trips and zones by pc with full_agg
    "incremental_agg": (f"SELECT z.label, MAX(t.fare) AS hi {JOINED}", RefreshPolicy()),
    "auto_agg": (
        "SELECT pc, COUNT(DISTINCT fare) AS fares, MIN(fare) AS lo FROM trips "
        "GROUP BY pc HAVING COUNT(*) > 1",
        RefreshPolicy("auto", full_above=0.5),
    ),
    "over_full": ("SELECT label, n FROM full_agg WHERE n >= 2", RefreshPolicy()),
}


@pytest.mark.spark
def test_views_equal_duckdb_under_every_policy(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(5)
    flow = Dataflow(spark, tmp_path / "warehouse")
    tables: dict[str, Collection] = {
        "trips": flow.source("trips", TRIPS, key=["id"]),
        "zones": flow.source("zones", ZONES),
    }
    for name, (sql, policy) in VIEWS.items():
        tables[name] = compile_view(flow, sql, tables, name=name, dialect="duckdb")
        flow.refresh[name] = policy
    rt = Runtime(flow)
    live: dict[str, Counter[Row]] = {"trips": Counter(), "zones": Counter()}
    next_id = iter(range(10**6))

    def trips(n: int) -> list[tuple[Row, int]]:
        return [
            ((next(next_id), rng.randrange(4), float(rng.randrange(1, 6))), 1) for _ in range(n)
        ]

    def deletes(n: int) -> list[tuple[Row, int]]:
        return [(r, -1) for r in rng.sample(sorted((+live["trips"]).elements()), n)]

    zones = [((pc, label), 1) for pc, label in [(0, "a"), (1, "b"), (2, "b"), (3, None)]]
    # epoch -> changes per table; runs end after the epochs in RUN_ENDS
    plan: list[dict[str, list[tuple[Row, int]]]] = [
        {"trips": trips(30), "zones": zones},  # 0 \ one run of two epochs: auto builds
        {"trips": trips(2)},  # 1 /
        {"trips": trips(3)},  # 2 small (and 2 deletes): auto maintains
        {"trips": trips(60)},  # 3 large: auto recomputes and drops its state
        {"trips": trips(2), "zones": [((1, "b"), -1), ((1, "c"), 1)]},  # 4 small, after compaction
        {"trips": trips(1)},  # 5: full_agg brought up to date alone first
    ]
    history: list[dict[str, Counter[Row]]] = []
    modes: list[dict[str, str]] = []
    for epoch, changes in enumerate(plan):
        if epoch == 2:
            changes["trips"] += deletes(2)
        for table, schema in (("trips", TRIPS), ("zones", ZONES)):
            rows = changes.get(table, [])
            append_changes(spark, rt, table, schema, rows, epoch)
            for r, d in rows:
                live[table][r] += d
        history.append({k: +v for k, v in live.items()})
        if epoch == 0:
            continue  # epochs 0 and 1 go through one run
        if epoch == 5:
            assert set(rt.run(views=["full_agg"]).refresh) == {"full_agg"}
        report = rt.run()
        modes.append({v: c.mode for v, c in report.refresh.items()})
        if epoch == 3:
            auto = flow.views["auto_agg"]
            full = flow.views["full_agg"]
            recomputed = {"auto_agg", "full_agg"}
            mine = private_state(flow, auto, recomputed), private_state(flow, full, recomputed)
            assert all(mine), "the recomputed views have operator state of their own"
            dropped = [*mine[0], *mine[1]]
            assert not any((flow.warehouse.path / str(x.trace_name)).exists() for x in dropped)
            shared = [x for x in rt.stateful_nodes(["incremental_agg"]) if x.inputs]
            assert all(rt.trace(x).reload().upper.epoch_bound() == 4 for x in shared)
            maintain_warehouse(spark, flow.warehouse, fuel=None, retention_hours=0)
            assert rt.trace(flow.sources["trips"]).reload().since.epoch_bound() == 3

    assert modes == [
        {"full_agg": "full", "incremental_agg": "incremental", "auto_agg": "incremental",
         "over_full": "incremental"},
        {"full_agg": "full", "incremental_agg": "incremental", "auto_agg": "incremental",
         "over_full": "incremental"},
        {"full_agg": "full", "incremental_agg": "incremental", "auto_agg": "full",
         "over_full": "incremental"},
        {"full_agg": "full", "incremental_agg": "incremental", "auto_agg": "incremental",
         "over_full": "incremental"},
        {"incremental_agg": "incremental", "auto_agg": "incremental", "over_full": "incremental"},
    ]  # fmt: skip
    # An up-to-date recomputed view leaves its dropped state alone; with nothing
    # new, a run does nothing.
    full_state = private_state(flow, flow.views["full_agg"], {"full_agg"})
    assert full_state
    assert not any((flow.warehouse.path / str(x.trace_name)).exists() for x in full_state)
    assert rt.run().epochs == 0
    sql = {name: query for name, (query, _) in VIEWS.items()}
    expected = duckdb_results(history, DUCKDB_TABLES, sql)
    assert not mismatches(rt, list(VIEWS), expected)
