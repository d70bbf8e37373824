"""What a pipeline file says about its tables, from the config alone: the tables each
view reads and the order views are built in."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dd_etl.errors import ConfigError
from dd_etl.pipeline.analysis import referenced_tables, view_order
from dd_etl.pipeline.config import LoadedConfig, load_config

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
