"""What a pipeline file says about its tables, from the config alone: the tables each
view reads, the order views are built in, and that none of it needs Spark (Dagster
draws its lineage from these while loading definitions)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dd_etl.errors import ConfigError
from dd_etl.pipeline.analysis import referenced_tables, view_order
from dd_etl.pipeline.config import LoadedConfig, load_config

ROOT = Path(__file__).resolve().parent.parent

PIPELINE = """\
name: p
warehouse: wh
sources:
  trips: {format: delta, path: data/trips}
  zones: {format: csv, path: data/zones}
  fares: {format: parquet, path: data/fares}
views:
  by_borough:
    sql: |
      SELECT z.borough, SUM(n) AS n
      FROM by_zone b JOIN zones z ON b.zone = z.zone_id
      GROUP BY z.borough
  by_zone:
    sql: |
      WITH t AS (SELECT zone FROM trips)
      SELECT zone, COUNT(*) AS n FROM t
      WHERE zone IN (SELECT zone_id FROM zones) OR zone IN (SELECT zone FROM trips)
      GROUP BY zone
  priced:
    python: views:priced
    inputs: [fares, by_zone]
  everything:
    python: views:everything
"""


def load(tmp_path: Path, text: str = PIPELINE) -> LoadedConfig:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config(path)


def reads(loaded: LoadedConfig, view: str) -> list[str]:
    return referenced_tables(loaded, view, loaded.config.views[view])


def test_a_sql_view_reads_the_tables_its_query_names_once_each_in_order(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    assert reads(loaded, "by_borough") == ["by_zone", "zones"]
    # the CTE ``t`` is not a table; ``trips`` named twice is read once
    assert reads(loaded, "by_zone") == ["trips", "zones"]


def test_a_python_view_reads_its_inputs_or_else_every_source(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    assert reads(loaded, "priced") == ["fares", "by_zone"]
    assert reads(loaded, "everything") == ["trips", "zones", "fares"]


def test_views_are_ordered_after_the_views_they_read_else_as_in_the_file(tmp_path: Path) -> None:
    assert view_order(load(tmp_path)) == ["by_zone", "by_borough", "priced", "everything"]


def test_unknown_inputs_of_a_python_view_are_refused_at_their_key(tmp_path: Path) -> None:
    loaded = load(tmp_path, PIPELINE.replace("[fares, by_zone]", "[fares, by_zones]"))
    with pytest.raises(ConfigError) as info:
        view_order(loaded)
    assert info.value.key == "views.priced.inputs"
    assert "by_zones" in info.value.reason


def test_an_unknown_table_on_a_later_line_of_a_query_points_at_that_line_of_the_file(
    tmp_path: Path,
) -> None:
    loaded = load(tmp_path, PIPELINE.replace("JOIN zones z", "JOIN zone z"))
    with pytest.raises(ConfigError) as info:
        reads(loaded, "by_borough")
    assert info.value.key == "views.by_borough.sql"
    assert info.value.line == 11  # the query starts on line 10 of the file
    assert "line 2, col 21 of the query: unknown table 'zone'" in info.value.reason


# In a fresh interpreter: which modules reading a pipeline file pulls in.
ANALYSE_IN_A_FRESH_PROCESS = """
import json, sys
from dd_etl.pipeline.analysis import referenced_tables, view_order
from dd_etl.pipeline.config import load_config

loaded = load_config(sys.argv[1])
order = view_order(loaded)
reads = {v: referenced_tables(loaded, v, loaded.config.views[v]) for v in order}
print(json.dumps({"order": order, "reads": reads, "pyspark": "pyspark" in sys.modules}))
"""

DAGSTER_DEFINITIONS_IN_A_FRESH_PROCESS = """
import json, sys
from pyspark import SparkContext
from dd_etl.dagster.definitions import pipeline_definitions

defs = pipeline_definitions([sys.argv[1]])
graph = defs.resolve_asset_graph()
deps = {
    key.path[-1]: sorted(k.path[-1] for k in graph.get(key).parent_keys)
    for key in graph.get_all_asset_keys()
}
started = SparkContext._gateway is not None or SparkContext._active_spark_context is not None
print(json.dumps({"deps": deps, "spark_started": started}))
"""


def in_a_fresh_process(program: str, file: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", program, str(file)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_analysing_a_pipeline_file_imports_no_spark(tmp_path: Path) -> None:
    load(tmp_path)
    result = in_a_fresh_process(ANALYSE_IN_A_FRESH_PROCESS, tmp_path / "pipeline.yaml")
    assert result["pyspark"] is False
    assert result["order"] == ["by_zone", "by_borough", "priced", "everything"]
    assert result["reads"] == {
        "by_zone": ["trips", "zones"],
        "by_borough": ["by_zone", "zones"],
        "priced": ["fares", "by_zone"],
        "everything": ["trips", "zones", "fares"],
    }


def test_dagster_definitions_draw_lineage_from_the_file_without_starting_spark(
    tmp_path: Path,
) -> None:
    load(tmp_path)
    result = in_a_fresh_process(DAGSTER_DEFINITIONS_IN_A_FRESH_PROCESS, tmp_path / "pipeline.yaml")
    assert result["spark_started"] is False
    deps = result["deps"]
    assert isinstance(deps, dict)
    assert deps["by_borough"] == ["by_zone", "zones"]
    assert deps["priced"] == ["by_zone", "fares"]
    assert deps["trips"] == []
