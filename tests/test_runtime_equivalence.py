"""Equivalence: after every epoch, every view equals DuckDB evaluating the same
query from scratch on the sources as of that epoch (bag semantics, SQL NULLs).

Changes are random inserts and deletes (including rows inserted and deleted in
the same epoch, duplicates, NULLs and empty epochs); several epochs go through
one run, so times travel in the data.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Dataflow
from dd_etl.runtime import Runtime
from dd_etl.runtime.recompute import recompute
from dd_etl.runtime.sizing import LOCAL_RELATION_THRESHOLD, SMALL, Thresholds
from tests.support.sizings import DEFAULT, MEDIUM
from tests.support.trips_and_zones import TRIPS, ZONES, Row, hashable

pytestmark = pytest.mark.spark

ORACLE = {
    "counts": "SELECT pc, COUNT(*) AS count FROM trips GROUP BY pc",
    "big": "SELECT pc, fare * 2 AS double_fare FROM trips WHERE fare > 10",
    "joined": "SELECT t.id, z.label FROM trips t JOIN zones z ON t.pc = z.pc",
    "pcs": "SELECT DISTINCT pc FROM trips",
    "with_zone": "SELECT * FROM trips t WHERE EXISTS (SELECT 1 FROM zones z WHERE z.pc = t.pc)",
    "no_zone": "SELECT * FROM trips t WHERE NOT EXISTS (SELECT 1 FROM zones z WHERE z.pc = t.pc)",
    "tags": "SELECT id, UNNEST(tags) AS tag FROM trips",
    "labels": "SELECT label FROM zones UNION ALL "
    "SELECT z.label FROM trips t JOIN zones z ON t.pc = z.pc WHERE t.fare IS NULL",
    "zone_counts": "SELECT label, COUNT(*) AS count FROM "
    "(SELECT DISTINCT t.id, z.label FROM trips t JOIN zones z ON t.pc = z.pc) GROUP BY label",
}


def build(spark: SparkSession, warehouse: Path, thresholds: Thresholds = DEFAULT) -> Runtime:
    flow = Dataflow(spark, warehouse)
    trips = flow.source("trips", TRIPS, key=["id"])
    zones = flow.source("zones", ZONES)
    joined = trips.join(zones, on="pc")
    flow.view("counts", trips.count(["pc"]))
    flow.view("big", trips.filter("fare > 10").select("pc", double_fare="fare * 2"))
    flow.view("joined", joined.select("id", "label"))
    flow.view("pcs", trips.select("pc").distinct())
    flow.view("with_zone", trips.semijoin(zones, "pc"))
    flow.view("no_zone", trips.antijoin(zones, "pc"))
    flow.view("tags", trips.explode("tags", "tag").select("id", "tag"))
    flow.view("labels", zones.select("label").concat(joined.filter("fare IS NULL").select("label")))
    flow.view("zone_counts", joined.select("id", "label").distinct().count(["label"]))
    return Runtime(flow, thresholds=thresholds)


def random_trip(rng: random.Random) -> Row:
    tags = rng.choice([None, [], ["a"], ["a", "b"], ["b", "b"]])
    return (rng.randrange(8), rng.choice([1, 2, 3, None]), rng.choice([5.0, 12.5, None]), tags)


def random_changes(rng: random.Random, current: Counter[Row], make: Any) -> list[tuple[Row, int]]:
    changes: list[tuple[Row, int]] = []
    for _ in range(rng.randrange(0, 6)):
        row = make(rng)
        changes.append((row, 1))
        if rng.random() < 0.2:  # inserted and deleted in the same epoch
            changes.append((row, -1))
    live = list((+current).elements())
    for row in rng.sample(live, k=min(len(live), rng.randrange(0, 3))):
        changes.append((row, -1))
    return changes


def oracle(con: duckdb.DuckDBPyConnection, sql: str) -> Counter[Row]:
    return Counter(hashable(r) for r in con.execute(sql).fetchall())


def load(con: duckdb.DuckDBPyConnection, trips: Counter[Row], zones: Counter[Row]) -> None:
    con.execute("CREATE OR REPLACE TABLE trips (id BIGINT, pc BIGINT, fare DOUBLE, tags VARCHAR[])")
    con.execute("CREATE OR REPLACE TABLE zones (pc BIGINT, label VARCHAR)")
    rows = [tuple(list(v) if isinstance(v, tuple) else v for v in r) for r in trips.elements()]
    if rows:
        con.executemany("INSERT INTO trips VALUES (?, ?, ?, ?)", rows)
    if zones:
        con.executemany("INSERT INTO zones VALUES (?, ?)", list(zones.elements()))


@pytest.mark.parametrize(
    "seed, arrow_batches, executors",
    [(3, False, False), (4, True, False), (5, False, True)],
    ids=["local-relations", "arrow-batches", "executors"],
)
def test_views_equal_a_from_scratch_evaluation_after_every_epoch(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    arrow_batches: bool,
    executors: bool,
) -> None:
    if arrow_batches:  # every non-empty row set the driver hands Spark as Arrow batches
        monkeypatch.setitem(SMALL.conf, LOCAL_RELATION_THRESHOLD, "0")
    rng = random.Random(seed)
    # executors: every run sized medium: executors read and write, lookups broadcast keys
    rt = build(spark, tmp_path / "warehouse", MEDIUM if executors else DEFAULT)
    trips: Counter[Row] = Counter()
    zones: Counter[Row] = Counter()
    history: list[tuple[Counter[Row], Counter[Row]]] = []
    epoch = 0
    for epochs_in_run in (3, 1, 2):
        for _ in range(epochs_in_run):
            trip_changes = random_changes(rng, trips, random_trip)
            zone_changes = random_changes(
                rng, zones, lambda r: (r.choice([1, 2, 3, None]), r.choice(["one", "two", None]))
            )
            for source, changes, bag in (
                ("trips", trip_changes, trips),
                ("zones", zone_changes, zones),
            ):
                schema = TRIPS if source == "trips" else ZONES
                df = spark.createDataFrame(
                    [(*r, d) for r, d in changes],
                    StructType([*schema.fields, StructField("_diff", LongType())]),
                )
                rt.append_source(source, df, epoch)
                for r, d in changes:
                    bag[hashable(r)] += d
            history.append((+trips, +zones))
            epoch += 1
        report = rt.run()
        assert report.upper == epoch
        for view in ("counts", "joined"):
            assert report.views[view] == rt.changes(view, report.lower, report.upper).count()

    con = duckdb.connect()
    for e, (t, z) in enumerate(history):
        load(con, t, z)
        for view, sql in ORACLE.items():
            ours = Counter(hashable(tuple(r)) for r in rt.read(view, e).collect())
            assert ours == oracle(con, sql), (view, e)
    # the from-scratch evaluation of the dataflow agrees with its maintained views
    for view in ORACLE:
        scratch = Counter(
            {hashable(tuple(r)[:-1]): r[-1] for r in recompute(rt, view, epoch - 1).collect()}
        )
        maintained = Counter(
            {
                hashable(tuple(r)[:-1]): r[-1]
                for r in rt.trace(rt.flow.views[view]).read_at().collect()
            }
        )
        assert scratch == maintained, view
        # the change feed from the first epoch accumulates to the same contents
        feed: Counter[Row] = Counter()
        for r in rt.changes(view, 0, epoch).collect():
            feed[hashable(tuple(r)[:-2])] += r["_diff"]
        assert +feed == maintained, view
