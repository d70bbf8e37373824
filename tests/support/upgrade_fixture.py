"""A warehouse kept from an earlier release, for the upgrade test: the pipeline of
``tests/fixtures/upgrade`` run for its first epochs by the code of that release,
then committed as it was left (sources, traces, materialized tables, change feeds).

Made once, by the release whose plans it holds, with

    python -m tests.support.upgrade_fixture

and never made again by a later one: what the test shows is that a later
release's ``dd-etl run`` carries it on (rebuilding the views whose plans
changed). The sources are the taxi demo's, a few dozen trips an epoch."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from tests.support.cluster_pipelines import taxi_generator

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
EPOCHS_KEPT = 3
"""Epochs 0, 1 and 2 are in the fixture; the test generates and runs the next."""
NEW_TRIPS = 40

PIPELINE = """\
# Kept from an earlier release with its warehouse: see tests/support/upgrade_fixture.py.
name: upgrade
warehouse: warehouse
sources:
  trips: {format: delta, path: data/trips, key: [trip_id]}
  zones: {format: parquet, path: data/zones, key: [zone_id]}
  links: {format: parquet, path: data/links, key: [from_zone]}
views:
  fares_by_passengers:
    sql: |
      SELECT passenger_count, MIN(fare_amount) AS min_fare, MAX(fare_amount) AS max_fare,
             COUNT(DISTINCT trip_distance) AS distances
      FROM trips GROUP BY passenger_count
    materialize: {path: out/fares_by_passengers}
  trips_by_borough:
    sql: |
      SELECT z.borough, COUNT(*) AS trips, SUM(t.fare_amount) AS revenue
      FROM trips t JOIN zones z ON t.pickup_zone = z.zone_id
      GROUP BY z.borough
    materialize: {path: out/trips_by_borough}
    changes: {path: out/trips_by_borough_changes}
  zone_days:
    sql: |
      SELECT z.zone_name, t.pickup_date, COUNT(*) AS trips, MAX(t.trip_distance) AS longest
      FROM trips t JOIN zones z ON t.pickup_zone = z.zone_id
      GROUP BY z.zone_name, t.pickup_date
    changes: {path: out/zone_days_changes}
  passengers_by_zone:
    sql: SELECT DISTINCT pickup_zone, passenger_count FROM trips
    materialize: {path: out/passengers_by_zone}
    changes: {path: out/passengers_by_zone_changes}
  reachable_from_zone_1:
    sql: |
      WITH RECURSIVE reach(zone_id) AS (
        SELECT 1 AS zone_id
        UNION
        SELECT l.to_zone FROM reach r JOIN links l ON r.zone_id = l.from_zone
      )
      SELECT r.zone_id, z.zone_name, z.borough
      FROM reach r JOIN zones z ON r.zone_id = z.zone_id
  borough_links:
    sql: |
      SELECT z.borough, l.to_zone, COUNT(*) AS trips, SUM(t.fare_amount) AS revenue
      FROM trips t
      JOIN zones z ON t.pickup_zone = z.zone_id
      JOIN links l ON l.from_zone = t.pickup_zone
      GROUP BY z.borough, l.to_zone
    materialize: {path: out/borough_links}
    changes: {path: out/borough_links_changes}
  busiest_links:
    sql: SELECT borough, MAX(trips) AS trips FROM borough_links GROUP BY borough
"""
VIEWS = [
    "fares_by_passengers",
    "trips_by_borough",
    "zone_days",
    "passengers_by_zone",
    "reachable_from_zone_1",
    "borough_links",
    "busiest_links",
]
MATERIALIZED = ["fares_by_passengers", "trips_by_borough", "passengers_by_zone", "borough_links"]
FEEDS = ["trips_by_borough", "zone_days", "passengers_by_zone", "borough_links"]
"""The views kept as Delta tables under ``out/<view>``, and those whose changes are
fed to ``out/<view>_changes``."""


FILE_TIMES = 1_767_225_600
"""The modification time of the file sources' files as the fixture's warehouse
recorded them (2026-01-01): a checkout gives files its own, which a run would
take for files rewritten in place."""


def pin_file_times(root: Path) -> None:
    """Give the files of the file sources under ``root/data`` ``FILE_TIMES``."""
    for source in ("zones", "links"):
        for file in (root / "data" / source).iterdir():
            os.utime(file, (FILE_TIMES, FILE_TIMES))


def write_epoch(root: Path, epoch: int) -> None:
    """The sources' changes of ``epoch`` under ``root/data`` (deterministic)."""
    taxi_generator().generate(root / "data", epoch, NEW_TRIPS)


def new_pipeline(root: Path) -> Path:
    """The fixture's pipeline file at ``root``, with no data or warehouse yet."""
    root.mkdir(parents=True, exist_ok=True)
    file = root / "pipeline.yaml"
    file.write_text(PIPELINE)
    return file


def make(root: Path) -> None:
    """The fixture: its pipeline run by this code for epochs ``0 .. EPOCHS_KEPT - 1``."""
    from typer.testing import CliRunner

    from dd_etl.cli import app

    shutil.rmtree(root, ignore_errors=True)
    pipeline = new_pipeline(root)
    for epoch in range(EPOCHS_KEPT):
        write_epoch(root, epoch)
        pin_file_times(root)
        result = CliRunner().invoke(app, ["run", str(pipeline)])
        assert result.exit_code == 0, result.stderr
    # Delta's commit info names the table's location: not where it was made
    made_at = str(root.resolve())
    for log in root.rglob("_delta_log/*.json"):
        log.write_text(log.read_text().replace(made_at, "/upgrade"))


if __name__ == "__main__":
    make(Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE)
