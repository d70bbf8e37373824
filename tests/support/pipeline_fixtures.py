"""Shared by the pipeline tests (no tests here): a small two-source pipeline, its data
changes, and an independent oracle (DuckDB over the source data as it is now)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

TRIPS = pa.schema([("trip_id", pa.int64()), ("pc", pa.int64()), ("zone", pa.int64())])
ZONES = pa.schema([("zone_id", pa.int64()), ("borough", pa.string()), ("diff", pa.int64())])

VIEWS_MODULE = """
from dd_etl.plan import aggregates as agg


def by_pc(flow, tables):
    return tables["trips"].count(["pc"], name="trips")


def by_pc_v2(flow, tables):
    return tables["trips"].filter("pc IS NOT NULL").count(["pc"], name="trips")


def zoned(flow, tables):
    joined = tables["trips"].join(tables["zones"], left_on=["zone"], right_on=["zone_id"])
    return joined.select("borough", "trip_id")
"""

ORACLE = {
    "by_pc": "SELECT pc, COUNT(*) AS trips FROM trips GROUP BY pc",
    "by_pc_v2": "SELECT pc, COUNT(*) AS trips FROM trips WHERE pc IS NOT NULL GROUP BY pc",
    "zoned": "SELECT z.borough, t.trip_id FROM trips t JOIN zones z ON t.zone = z.zone_id",
}


BY_PC_SQL = "SELECT pc, COUNT(*) AS trips FROM trips GROUP BY pc"
BY_PC_V2_SQL = "SELECT pc, COUNT(*) AS trips FROM trips WHERE pc IS NOT NULL GROUP BY pc"


def write_pipeline(
    root: Path, module: str, by_pc_sql: str | None = None, zoned_refresh: str = "incremental"
) -> Path:
    """The pipeline file under ``root`` (data under ``root/data``), with its views in
    ``root/<module>.py`` (a name unique per test: Python caches imported modules)."""
    (root / f"{module}.py").write_text(VIEWS_MODULE)
    by_pc = f"sql: {by_pc_sql}" if by_pc_sql else f"python: {module}:by_pc\n    inputs: [trips]"
    by_pc = by_pc.replace("\n", "\n        ")
    text = textwrap.dedent(
        f"""\
        name: e2e
        warehouse: warehouse
        spark: {{master: "local[2]", conf: {{spark.sql.shuffle.partitions: "2"}}}}
        sources:
          trips: {{format: delta, path: data/trips, key: [trip_id]}}
          zones: {{format: parquet, path: data/zones, key: [zone_id]}}
        views:
          by_pc:
            {by_pc}
            materialize: {{path: out/by_pc}}
          zoned:
            python: {module}:zoned
            inputs: [trips, zones]
            changes: {{path: out/zoned_changes}}
            refresh: {zoned_refresh}
        """
    )
    path = root / "pipeline.yaml"
    path.write_text(text)
    return path


def change_data(root: Path, epoch: int) -> None:
    """Epoch 0 loads; later epochs insert, update and delete trips and re-zone."""
    trips, zones = root / "data" / "trips", root / "data" / "zones"
    zones.mkdir(parents=True, exist_ok=True)
    if epoch == 0:
        rows = [{"trip_id": i, "pc": [1, 2, None][i % 3], "zone": i % 4} for i in range(12)]
        write_deltalake(
            str(trips),
            pa.Table.from_pylist(rows, TRIPS),
            configuration={"delta.enableChangeDataFeed": "true"},
        )
        zone_rows = [{"zone_id": z, "borough": f"b{z % 2}", "diff": 1} for z in range(3)]
        pq.write_table(pa.Table.from_pylist(zone_rows, ZONES), zones / "z0.parquet")
        return
    first = 12 + 4 * (epoch - 1)
    rows = [{"trip_id": i, "pc": i % 3, "zone": i % 4} for i in range(first, first + 4)]
    write_deltalake(str(trips), pa.Table.from_pylist(rows, TRIPS), mode="append")
    table = DeltaTable(str(trips))
    table.update(updates={"pc": "pc + 1"}, predicate=f"trip_id = {epoch}")
    table.delete(f"trip_id = {epoch + 5}")
    # a zone moves to another borough; a duplicate row of zone 3 comes and goes
    zone, before, after = {1: (1, "b1", "b9"), 2: (2, "b0", "b9")}.get(epoch, (1, "b9", "b1"))
    moved = [
        {"zone_id": zone, "borough": before, "diff": -1},
        {"zone_id": zone, "borough": after, "diff": 1},
        {"zone_id": 3, "borough": "b3", "diff": 1 if epoch % 2 else -1},
    ]
    pq.write_table(pa.Table.from_pylist(moved, ZONES), zones / f"z{epoch}.parquet")


def oracle(root: Path, view: str) -> Counter[str]:
    """The view evaluated by DuckDB on the sources as they are now (bag semantics)."""
    trips = DeltaTable(str(root / "data" / "trips")).to_pyarrow_table()
    zone_files = sorted((root / "data" / "zones").glob("*.parquet"))
    zone_updates = pa.concat_tables([pq.read_table(f) for f in zone_files])
    con = duckdb.connect()
    con.register("trips", trips)
    con.register("zone_updates", zone_updates)
    con.execute(
        "CREATE TABLE zones AS SELECT k AS zone_id, b AS borough FROM "
        "(SELECT zone_id AS k, borough AS b, SUM(diff) AS n FROM zone_updates GROUP BY ALL), "
        "range(CAST(n AS BIGINT))"
    )
    rows = con.execute(ORACLE[view]).fetchall()
    columns = [d[0] for d in con.description or []]
    return bag([dict(zip(columns, r, strict=True)) for r in rows])


def bag(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in records)
