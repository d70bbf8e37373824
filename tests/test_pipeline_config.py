"""Bad pipeline files: each error names the file, the line, the key path and what
is wrong, as one paragraph with exit status 2, before anything is committed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.errors import ConfigError
from dd_etl.pipeline.analysis import view_order
from dd_etl.pipeline.config import load_config

GOOD = """\
name: p
warehouse: wh
sources:
  trips: {format: delta, path: data/trips}
views:
  a:
    sql: SELECT * FROM trips
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str) -> ConfigError:
    loaded = None
    with pytest.raises(ConfigError) as info:
        loaded = load_config(write(tmp_path, text))
        view_order(loaded)
    return info.value


@pytest.mark.parametrize(
    ("text", "key", "line", "reason"),
    [
        (GOOD.replace("format: delta", "format: delta, pth: x"), "sources.trips.pth", 4,
         "unknown key"),
        (GOOD.replace("warehouse: wh\n", ""), "warehouse", None, "required key is missing"),
        (GOOD.replace("format: delta", "format: avro"), "sources.trips.format", 4, "'delta'"),
        (GOOD.replace("sql: SELECT * FROM trips", "sql: SELECT * FROM trip"), "views.a.sql", 7,
         "line 1, col 15 of the query: unknown table 'trip'"),
        (GOOD + "  b:\n    sql: SELECT * FROM c\n  c:\n    sql: SELECT * FROM b\n", "views.b", 8,
         "cycle: b → c → b"),
        (GOOD.replace("sql: SELECT * FROM trips", "python: os:system()"), "views.a.python", 7,
         "should match pattern"),
        (GOOD.replace("    sql: SELECT * FROM trips", "    description: no definition"), "views.a",
         6, "exactly one of `sql` or `python`"),
        (GOOD.replace("path: data/trips", "path: s3://b/t, storage_options: "
                      "{AWS_SECRET_ACCESS_KEY: abc}"), "sources.trips.storage_options."
         "AWS_SECRET_ACCESS_KEY", 4, "environment variable reference"),
        (GOOD.replace("path: data/trips", "path: s3://b/t, storage_options: "
                      "{AWS_SECRET_ACCESS_KEY: '${DD_ETL_TEST_UNSET}'}"),
         "sources.trips.storage_options.AWS_SECRET_ACCESS_KEY", 4,
         "environment variable DD_ETL_TEST_UNSET is not set"),
        (GOOD.replace("views:", "views: [\n"), "", 8, "not valid YAML"),
        (GOOD + "    refresh: sometimes\n", "views.a.refresh", 8, "'auto', 'incremental'"),
        (GOOD + "    full_refresh_above: 0.2\n", "views.a", 6, "applies to `refresh: auto`"),
        (GOOD + "    refresh: auto\n    full_refresh_above: 0\n", "views.a.full_refresh_above",
         9, "greater than 0"),
        (GOOD + "sizing: {small_records: -1}\n", "sizing.small_records", 8,
         "greater than or equal to 0"),
        (GOOD + "sizing: {small_rows: 10}\n", "sizing.small_rows", 8,
         "did you mean 'small_records'"),
    ],
)  # fmt: skip
def test_config_errors_point_at_the_key(
    tmp_path: Path, text: str, key: str, line: int | None, reason: str
) -> None:
    e = error_of(tmp_path, text)
    assert e.key == key
    assert e.line == line
    assert reason in e.reason
    assert str(e).startswith(f"{tmp_path / 'pipeline.yaml'}")


MISSPELT = """\
name: p
warehouse: wh
sources:
  orders:
    fromat: csv
    path: data/orders
views:
  a:
    sql: SELECT * FROM orders
    refresh: sometimes
    materialize: {path: out/a, overwrite: true}
"""


def test_every_problem_is_named_unknown_keys_first(tmp_path: Path) -> None:
    e = error_of(tmp_path, MISSPELT)
    assert [(p.key, p.line) for p in e.problems] == [
        ("sources.orders.fromat", 5),
        ("views.a.materialize.overwrite", 11),
        ("sources.orders.format", 4),
        ("views.a.refresh", 10),
    ]
    assert (e.key, e.line) == ("sources.orders.fromat", 5)
    assert e.reason == "unknown key 'fromat' (did you mean 'format'?)"
    file = tmp_path / "pipeline.yaml"
    assert str(e).startswith(
        f"{file}:5: sources.orders.fromat: unknown key 'fromat' (did you mean 'format'?); "
        f"{file}:11: views.a.materialize.overwrite: unknown key 'overwrite' (check its "
        "spelling and place; known keys here: path); "
        f"{file}:4: sources.orders.format: required key is missing; "
        f"{file}:10: views.a.refresh: Input should be"
    )
    assert "more error" not in str(e)


def test_problems_found_before_validation_are_listed_with_the_others(tmp_path: Path) -> None:
    text = GOOD.replace(
        "path: data/trips",
        "pth: data/trips, storage_options: {AWS_SECRET_ACCESS_KEY: '${DD_ETL_TEST_UNSET}'}",
    )
    e = error_of(tmp_path, text)
    assert [p.key for p in e.problems] == [
        "sources.trips.pth",
        "sources.trips.storage_options.AWS_SECRET_ACCESS_KEY",
        "sources.trips.path",
    ]
    assert "unknown key 'pth' (did you mean 'path'?)" in e.reason
    assert "environment variable DD_ETL_TEST_UNSET is not set" in str(e)


def test_the_cli_names_a_misspelt_key_before_what_it_leaves_missing(tmp_path: Path) -> None:
    path = write(tmp_path, MISSPELT)
    result = CliRunner().invoke(app, ["status", str(path)])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    misspelt = (
        "pipeline.yaml:5: sources.orders.fromat: unknown key 'fromat' (did you mean 'format'?)"
    )
    assert misspelt in said
    assert said.index(misspelt) < said.index("sources.orders.format: required key is missing")
    assert "Traceback" not in result.stderr


def test_secrets_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DD_ETL_TEST_SECRET", "s3cr3t")
    text = GOOD.replace(
        "path: data/trips",
        "path: s3://b/t, storage_options: {AWS_SECRET_ACCESS_KEY: '${DD_ETL_TEST_SECRET}'}",
    )
    loaded = load_config(write(tmp_path, text))
    options = loaded.config.sources["trips"].storage_options
    assert options["AWS_SECRET_ACCESS_KEY"] == "s3cr3t"


def test_the_cli_renders_config_errors_as_one_paragraph(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("sql: SELECT * FROM trips", "sql: SELECT * FROM nope"))
    result = CliRunner().invoke(app, ["status", str(path)])
    assert result.exit_code == 2
    assert "pipeline.yaml:7: views.a.sql" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "wh").exists()


def test_sizing_sets_the_runtimes_thresholds(tmp_path: Path) -> None:
    """What the file sets, the defaults for the rest."""
    from dd_etl.runtime.sizing import Thresholds

    loaded = load_config(write(tmp_path, GOOD + "sizing: {small_records: 0, rewrite_records: 5}\n"))
    thresholds = Thresholds(**loaded.config.sizing.settings())
    assert thresholds == Thresholds(small_records=0, rewrite_records=5)
    assert thresholds.for_records(1).name == "large"
    assert thresholds.for_records(1, state=100).name == "medium"
    assert Thresholds().for_records(1).name == "small"


def test_a_table_on_a_store_is_rewritten_while_its_bytes_are_few(tmp_path: Path) -> None:
    """On a local disk the view's records decide; on an object store the table's
    bytes too."""
    from dd_etl.runtime.sizing import Thresholds

    text = GOOD + "sizing: {rewrite_records: 10, store_rewrite_bytes: 1000}\n"
    thresholds = Thresholds(**load_config(write(tmp_path, text)).config.sizing.settings())
    assert thresholds.rewrites_whole(10, None) and not thresholds.rewrites_whole(11, None)
    assert thresholds.rewrites_whole(10, 1000) and not thresholds.rewrites_whole(10, 1001)
    assert not thresholds.rewrites_whole(11, 0)
