"""Shared by the cluster tests (no tests here): the taxi demo's pipeline and a small
SQL pipeline, written twice over one directory of source data (one copy to run on
a cluster, one to run locally), and what a run leaves behind, read as bags."""

from __future__ import annotations

import importlib.util
import json
import re
import textwrap
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

from deltalake import DeltaTable
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.lake import Location
from dd_etl.pipeline.config import load_config
from tests.support.pipeline_fixtures import bag

ROOT = Path(__file__).resolve().parents[2]
TAXI = ROOT / "assets" / "taxi"


def taxi_generator() -> ModuleType:
    """``assets/taxi/generate.py``, loaded as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("taxi_generate", TAXI / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sub(pattern: str, replacement: str, text: str, at_least: int = 1) -> str:
    new, n = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    assert n >= at_least, f"the demo's pipeline file no longer has {pattern!r}"
    return new


TAXI_VIEWS = ["fares_by_passengers", "trips_by_borough", "reachable_from_zone_1"]


def taxi_pipeline(directory: Path, data: str) -> Path:
    """The demo's pipeline file in ``directory``: its warehouse there, its sources
    under ``data`` (relative to ``directory``), no master (``DD_ETL_SPARK_MASTER``
    chooses: the file's master would win over it)."""
    text = (TAXI / "pipeline.yaml").read_text()
    text = _sub(r"^warehouse:.*$", "warehouse: warehouse", text)
    text = _sub(r"^\s+master:.*\n", "", text)
    text = _sub(r"^(\s+path: )data/", rf"\g<1>{data}/", text, at_least=3)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pipeline.yaml"
    path.write_text(text)
    return path


JOIN_VIEWS = {
    # a join and an aggregate, kept in a Delta table and a change feed
    "boroughs": (
        "SELECT z.borough, COUNT(*) AS trips, SUM(t.pc) AS pcs, MAX(t.trip_id) AS last_trip "
        "FROM trips t JOIN zones z ON t.zone = z.zone_id GROUP BY z.borough"
    ),
    # a loop: walks of up to two hops from the zones of borough b0 along zone -> pc
    # (every trip a road), counted: a bag that changes with every trip and zone
    "walks": (
        "WITH RECURSIVE walk(node, hops) AS ("
        "SELECT zone_id, 0 FROM zones WHERE borough = 'b0' "
        "UNION ALL "
        "SELECT t.pc, w.hops + 1 FROM walk w JOIN trips t ON w.node = t.zone "
        "WHERE w.hops < 2 AND t.pc IS NOT NULL) "
        "SELECT node, hops, COUNT(*) AS walks FROM walk GROUP BY node, hops"
    ),
    # the set of zones reachable from zone 0, with their boroughs (a NULL pc is
    # reached too, where the base ``SELECT 0`` has none)
    "reach": (
        "WITH RECURSIVE reach(node) AS (SELECT 0 UNION "
        "SELECT t.pc FROM reach r JOIN trips t ON r.node = t.zone) "
        "SELECT r.node, z.borough FROM reach r LEFT JOIN zones z ON r.node = z.zone_id"
    ),
}
JOIN_SINKS = {"boroughs": "out/boroughs", "boroughs_changes": "out/boroughs_changes"}


def join_pipeline(directory: Path, data: str) -> Path:
    """A pipeline of SQL views over ``tests.support.pipeline_fixtures.change_data``'s
    sources (under ``data``, relative to ``directory``); no master."""
    text = textwrap.dedent(
        f"""\
        name: cluster_join
        warehouse: warehouse
        spark: {{conf: {{spark.sql.shuffle.partitions: "2", spark.ui.enabled: "false"}}}}
        sources:
          trips: {{format: delta, path: {data}/trips, key: [trip_id]}}
          zones: {{format: parquet, path: {data}/zones, key: [zone_id]}}
        views:
          boroughs:
            sql: "{JOIN_VIEWS["boroughs"]}"
            materialize: {{path: out/boroughs}}
            changes: {{path: out/boroughs_changes}}
          walks:
            sql: "{JOIN_VIEWS["walks"]}"
          reach:
            sql: "{JOIN_VIEWS["reach"]}"
        """
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pipeline.yaml"
    path.write_text(text)
    return path


def cli(*args: str) -> str:
    """``dd-etl ARGS`` in this process (on its Spark), its standard output."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (args, result.stdout, result.stderr)
    return result.stdout


def view_at(pipeline: Path, view: str, epoch: int) -> Counter[str]:
    return bag(json.loads(cli("read", str(pipeline), view, "--format", "json",
                              "--as-of", str(epoch))))  # fmt: skip


def delta_table(where: Location) -> Counter[str]:
    return bag(
        DeltaTable(where.uri, storage_options=where.delta_options).to_pyarrow_table().to_pylist()
    )


def committed_epochs(where: Location) -> list[str]:
    """The epochs of a sink's commits, in commit order (each once if exactly once)."""
    history = DeltaTable(where.uri, storage_options=where.delta_options).history()
    return [h["dd_etl.epoch"] for h in reversed(history) if "dd_etl.epoch" in h]


def outcome(pipeline: Path, views: list[str], sinks: dict[str, str], epochs: int) -> dict[str, Any]:
    """What running ``pipeline`` left: every view at every epoch, every sink's rows
    (at ``sinks``' paths, as the file would name them) and the epochs it committed,
    the last tick's epoch."""
    found: dict[str, Any] = {
        f"{view}@{epoch}": view_at(pipeline, view, epoch)
        for view in views
        for epoch in range(epochs)
    }
    loaded = load_config(pipeline)
    for name, path in sinks.items():
        where = loaded.location(name, path)
        found[name] = delta_table(where)
        found[f"{name} commits"] = committed_epochs(where)
    status = json.loads(cli("status", str(pipeline), "--json"))
    found["last tick"] = status["last_tick"]["epoch"]
    return found
