"""Data generator of the taxi demo: one epoch of source changes per call.

    python assets/taxi/generate.py assets/taxi/data --epoch 0   # first load
    python assets/taxi/generate.py assets/taxi/data --epoch 1   # inserts, updates, deletes

``trips`` is a Delta table with its change data feed on: each epoch appends new
trips, corrects some fares (UPDATE) and deletes some trips (DELETE), as an
upstream job would. ``zones`` is a directory of parquet files: the first epoch
writes every zone; later epochs add a file that renames a zone's borough, with
a ``diff`` column (-1 removes the old row, +1 adds the new one). ``links``, the
one-way roads between zones, is a directory of parquet files too: the first
epoch opens a set of roads, each later one closes a road and opens another.
Deterministic: the same epoch always writes the same changes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

ZONES = 12
BOROUGHS = ["Manhattan", "Brooklyn", "Queens", "Bronx", "Staten Island"]
TRIPS = pa.schema(
    [
        ("trip_id", pa.int64()),
        ("passenger_count", pa.int64()),
        ("fare_amount", pa.float64()),
        ("trip_distance", pa.float64()),
        ("pickup_zone", pa.int64()),
        ("pickup_date", pa.date32()),
    ]
)
LINK_SCHEMA = pa.schema([("from_zone", pa.int64()), ("to_zone", pa.int64()), ("diff", pa.int64())])
ZONE_SCHEMA = pa.schema(
    [("zone_id", pa.int64()), ("zone_name", pa.string()), ("borough", pa.string()),
     ("diff", pa.int64())]
)  # fmt: skip


def trips(rng: random.Random, first: int, n: int) -> pa.Table:
    rows = []
    for trip_id in range(first, first + n):
        rows.append(
            {
                "trip_id": trip_id,
                "passenger_count": rng.choice([1, 1, 1, 2, 2, 3, 4, 5, 6, None]),
                "fare_amount": round(rng.uniform(3, 80), 2),
                "trip_distance": round(rng.uniform(0.3, 25), 1),
                "pickup_zone": rng.randint(1, ZONES + 2),  # a few zones are unknown
                "pickup_date": dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 30)),
            }
        )
    return pa.Table.from_pylist(rows, TRIPS)


def zone_row(zone: int, borough: str, diff: int) -> dict[str, object]:
    return {"zone_id": zone, "zone_name": f"Zone {zone}", "borough": borough, "diff": diff}


def links_at(epoch: int) -> set[tuple[int, int]]:
    """The open roads after ``epoch``: replayed from the first epoch, so any
    epoch can be generated on its own."""
    rng = random.Random("links")
    links: set[tuple[int, int]] = set()
    while len(links) < ZONES + 4:
        a, b = rng.randint(1, ZONES), rng.randint(1, ZONES)
        if a != b:
            links.add((a, b))
    for _ in range(epoch):
        links.discard(rng.choice(sorted(links)))
        a, b = rng.randint(1, ZONES), rng.randint(1, ZONES)
        if a != b:
            links.add((a, b))
    return links


def write_links(root: Path, epoch: int) -> str:
    before = links_at(epoch - 1) if epoch else set()
    after = links_at(epoch)
    rows = [{"from_zone": a, "to_zone": b, "diff": -1} for a, b in sorted(before - after)]
    rows += [{"from_zone": a, "to_zone": b, "diff": 1} for a, b in sorted(after - before)]
    (root / "links").mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, LINK_SCHEMA)
    pq.write_table(table, root / "links" / f"links-{epoch:03d}.parquet")
    return f"links: {len(after - before)} opened, {len(before - after)} closed"


LOAD_CHUNK = 1_000_000
"""A large load is written this many trips at a time (a Delta commit each)."""


def generate(root: Path, epoch: int, new_trips: int = 400, loaded: int | None = None) -> str:
    """Epoch ``epoch``'s data: ``loaded`` trips at epoch 0 (default three epochs'
    worth), ``new_trips`` new ones at every later epoch."""
    load = new_trips * 3 if loaded is None else loaded
    return f"{_trips_and_zones(root, epoch, new_trips, load)}; {write_links(root, epoch)}"


def _trips_and_zones(root: Path, epoch: int, new_trips: int, loaded: int) -> str:
    rng = random.Random(epoch)
    trips_path, zones_path = root / "trips", root / "zones"
    zones_path.mkdir(parents=True, exist_ok=True)
    if epoch == 0:
        for first in range(0, max(loaded, 1), LOAD_CHUNK):
            chunk = trips(rng, first, min(LOAD_CHUNK, loaded - first))
            if first == 0:
                cdf = {"delta.enableChangeDataFeed": "true"}
                write_deltalake(str(trips_path), chunk, mode="overwrite", configuration=cdf)
            else:
                write_deltalake(str(trips_path), chunk, mode="append")
        rows = [zone_row(z, BOROUGHS[z % len(BOROUGHS)], 1) for z in range(1, ZONES + 1)]
        pq.write_table(pa.Table.from_pylist(rows, ZONE_SCHEMA), zones_path / "zones-000.parquet")
        return f"trips: {loaded} rows; zones: {ZONES} rows"
    first = loaded + (epoch - 1) * new_trips
    write_deltalake(str(trips_path), trips(rng, first, new_trips), mode="append")
    upper = first + new_trips
    corrected = sorted(rng.sample(range(upper), 25))
    deleted = sorted(rng.sample(range(upper), 15))
    table = DeltaTable(str(trips_path))
    table.update(
        updates={"fare_amount": "fare_amount + 1.5"},
        predicate=f"trip_id IN ({', '.join(map(str, corrected))})",
    )
    table.delete(f"trip_id IN ({', '.join(map(str, deleted))})")
    zone = epoch % ZONES + 1
    old = BOROUGHS[zone % len(BOROUGHS)] if epoch <= ZONES else None
    rename = [zone_row(zone, old or "", -1), zone_row(zone, f"{old} North", 1)]
    pq.write_table(
        pa.Table.from_pylist(rename, ZONE_SCHEMA), zones_path / f"zones-{epoch:03d}.parquet"
    )
    return f"trips: +{new_trips} rows, {len(corrected)} fares corrected, {len(deleted)} deleted"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="where trips/ and zones/ are written")
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--trips", type=int, default=400, help="new trips per epoch")
    parser.add_argument("--loaded", type=int, help="trips at epoch 0 (default: 3 x --trips)")
    args = parser.parse_args()
    print(f"epoch {args.epoch}: {generate(args.root, args.epoch, args.trips, args.loaded)}")


if __name__ == "__main__":
    main()
