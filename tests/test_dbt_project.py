"""A dbt project as a pipeline: dbt-core compiles it (dbt-spark's session method,
on the tests' Spark), its models, seed, sources and tests are the pipeline's
sources and views, and after each epoch of inserts, updates and deletes every
model equals what ``dbt run --full-refresh`` computes with plain Spark over the
same data, its stored models' Delta tables too, and each test's failures equal
``dbt test``'s. What cannot be kept up to date is refused by file and line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from dd_etl.cli import app
from dd_etl.dagster import SparkResource, pipeline_definitions
from dd_etl.dbt.compiler import OUTPUT
from dd_etl.errors import ConfigError
from dd_etl.pipeline.config import load_config
from tests.support.dbt_shop import (
    MODELS,
    STORED,
    ShopData,
    dbt_reference,
    write_pipeline,
    write_project,
)
from tests.support.trace_rows import changes_between, delta_rs_feed, view_contents

EPOCHS = 3
DD_ETL = (sys.executable, "-c", "from dd_etl.cli import app; app()")
REBUILT = {"customers", "segment_summary"}
"""The edited model and the one model that reads it."""


def cli(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.stdout, result.stderr, result.exception)
    return result.stdout + result.stderr


def table_contents(path: Path) -> Counter[str]:
    rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return Counter(json.dumps(r, sort_keys=True, default=str) for r in rows)


def first_commit(table: Path) -> int:
    """When the Delta table was created: another time once it was made again."""
    return int(DeltaTable(str(table)).history()[-1]["timestamp"])


@pytest.mark.spark
def test_every_model_and_test_equals_dbt_on_spark_epoch_by_epoch(
    spark: SparkSession, tmp_path: Path
) -> None:
    project = write_project(tmp_path)
    strict = "  models:\n    segment_summary: {refresh: strict}\n"
    path = str(write_pipeline(tmp_path, strict))
    data = ShopData(tmp_path)
    statuses = []
    for epoch in range(EPOCHS):
        if epoch:
            data.change()
        said = cli("run", path)
        assert f"ran epoch {epoch}" in said, said
        models, failures = dbt_reference(spark, project, data, "shop_reference")
        for model in MODELS:
            assert view_contents(tmp_path / "wh", model) == models[model], (epoch, model)
        for model in STORED:
            table = tmp_path / "tables" / "analytics" / model
            assert table_contents(table) == models[model], (epoch, model)
        outcomes = {}
        for line in cli("status", path).splitlines():
            cells = [c.strip() for c in line.split("│")]
            if len(cells) == 7 and cells[1] in failures:
                outcomes[cells[1]] = int(cells[4])
                statuses.append(cells[3])
        assert outcomes == failures, epoch
        assert "dbt tests: " in said, said
    assert {"pass", "fail"} <= set(statuses), statuses
    # the compile is kept: an unchanged project is not compiled again
    assert len(list((project / OUTPUT).glob("project-*.json"))) == 1

    # An edit of one model: it and the model below it are rebuilt, no other, once
    # the model below, being strict, is rebuilt by hand; each equals dbt's, and the
    # edited model's table's change feed holds just its rows' difference.
    created = {m: first_commit(tmp_path / "wh" / "views" / m) for m in MODELS}
    edited = project / "models" / "marts" / "customers.sql"
    edited.write_text(edited.read_text() + "where c.customer_id % 7 <> 3\n")
    table = tmp_path / "tables" / "analytics" / "customers"
    rows_before = table_contents(table)
    data.change()
    said = cli("run", path, code=4)  # segment_summary is strict: rebuilt when asked
    assert f"`dd-etl rebuild {path} segment_summary`" in " ".join(said.split()), said
    assert first_commit(tmp_path / "wh" / "views" / "customers") == created["customers"]
    cli("rebuild", path, "segment_summary")
    said = cli("run", path)
    assert set(re.findall(r"^rebuilt (\w+):", said, re.MULTILINE)) == REBUILT, said
    models, _ = dbt_reference(spark, project, data, "shop_reference")
    for model in MODELS:
        assert view_contents(tmp_path / "wh", model) == models[model], ("edited", model)
        recreated = first_commit(tmp_path / "wh" / "views" / model) != created[model]
        assert recreated == (model in REBUILT), model
    rows_after = table_contents(table)
    assert rows_after == models["customers"]
    version = DeltaTable(str(table)).version()
    assert delta_rs_feed(table, version) == changes_between(rows_before, rows_after)
    assert len(rows_before - rows_after) < len(rows_before)  # not every row again


MINIMAL = {
    "dbt_project.yml": "name: tiny\nversion: '1.0'\nconfig-version: 2\nprofile: tiny\n",
    "models/sources.yml": (
        "version: 2\nsources:\n  - name: raw\n    tables:\n"
        "      - name: events\n        meta: {dd_etl: {format: parquet, path: ../events}}\n"
    ),
    "models/counts.sql": (
        "select kind, count(*) as n\nfrom {{ source('raw', 'events') }}\ngroup by kind\n"
    ),
}
REFUSED = {
    "a Python model": (
        {"models/scored.py": "def model(dbt, session):\n    return dbt.ref('counts')\n"},
        "models/scored.py", 1, "Python model scored",
    ),
    "a snapshot": (
        {"snapshots/kept.sql": (
            "{% snapshot kept %}\n{{ config(target_schema='snap', unique_key='kind', "
            "strategy='check', check_cols='all') }}\nselect * from {{ ref('counts') }}\n"
            "{% endsnapshot %}\n"
        )},
        "snapshots/kept.sql", 1, "snapshot kept",
    ),
    "a model reading {{ this }}": (
        {"models/growing.sql": (
            "select kind, n\nfrom {{ ref('counts') }}\n"
            "union all\nselect kind, n from {{ this }}\n"
        )},
        "models/growing.sql", 4, "model growing reads {{ this }} outside `is_incremental()`",
    ),
    "a macro running a query": (
        {
            "macros/kinds.sql": (
                "{% macro kinds() %}\n{% set found = run_query('select 1') %}\n"
                "{{ return([]) }}\n{% endmacro %}\n"
            ),
            "models/listed.sql": "-- {{ kinds() }}\nselect kind from {{ ref('counts') }}\n",
        },
        "models/listed.sql", 1, "model listed calls run_query (through macro kinds",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_cannot_be_kept_is_refused_by_file_and_line(case: str, tmp_path: Path) -> None:
    files, file, line, reason = REFUSED[case]
    project = write_project(tmp_path, {**MINIMAL, **files}, only=True)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("name: tiny\nwarehouse: wh\ndbt: {project: project}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(pipeline)
    assert raised.value.file == str(project / file), raised.value
    assert raised.value.line == line, raised.value
    assert reason in raised.value.reason, raised.value


def test_a_non_deterministic_model_is_refused_at_its_compiled_line(tmp_path: Path) -> None:
    """Refused as any view's SQL is, at the compiled file's line, with the model named."""
    files = {"models/sampled.sql": "select kind,\n  rand() as r\nfrom {{ ref('counts') }}\n"}
    project = write_project(tmp_path, {**MINIMAL, **files}, only=True)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("name: tiny\nwarehouse: wh\ndbt: {project: project}\n")
    # a process with no Spark yet (dd-etl's own) compiles the project in a process of
    # its own, and the refusal comes before Spark starts
    done = subprocess.run(
        [*DD_ETL, "run", str(pipeline)],
        env={**os.environ, "COLUMNS": "1000"},  # messages on one line each
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "SparkContext" not in said
    compiled = project / OUTPUT / "compiled" / "tiny" / "models" / "sampled.sql"
    assert f"{compiled}:2: model sampled:" in said, said
    assert "rand" in said, said


@pytest.mark.spark
def test_dagster_has_dagster_dbts_keys_and_the_tests_as_checks(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Keys as ``dagster-dbt`` gives them by default (models and seeds by name, sources
    ``[source, table]``), lineage through the ephemeral model, descriptions and
    column descriptions; each test a check on its model, run with the tick (an
    ``error`` test failing its check, a ``warn`` one warning); the rebuild backfill
    of a model recomputes it and the model reading it."""
    write_project(tmp_path)
    path = write_pipeline(tmp_path)
    ShopData(tmp_path)
    defs = pipeline_definitions([path], spark=SparkResource())
    graph = defs.resolve_asset_graph()
    sources = {"raw/customers", "raw/orders", "raw/payments"}
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {*MODELS, "order_statuses", *sources}
    orders = graph.get(dg.AssetKey("orders"))
    assert orders.parent_keys == {
        dg.AssetKey(k) for k in ("stg_orders", "stg_payments", "order_statuses")
    }
    assert graph.get(dg.AssetKey("stg_orders")).parent_keys == {dg.AssetKey(["raw", "orders"])}
    staged = graph.get(dg.AssetKey("stg_customers"))
    assert staged.description == "One row per customer, names cleaned."
    columns = staged.metadata["dagster/column_schema"].columns
    assert [(c.name, c.description) for c in columns] == [("customer_id", "The customer's id.")]
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert {
        ("stg_customers", "unique_stg_customers_customer_id"),
        ("orders", "assert_paid_at_most_twice_amount"),
        ("stg_orders", "relationships_stg_orders_customer_id__customer_id__ref_stg_customers_"),
    } <= checks

    instance = dg.DagsterInstance.ephemeral()
    ticked = defs.resolve_job_def("shop_tick").execute_in_process(instance=instance)
    assert ticked.success
    found = {e.check_name: e for e in ticked.get_asset_check_evaluations()}
    paid = found["assert_paid_at_most_twice_amount"]
    assert not paid.passed and paid.severity == dg.AssetCheckSeverity.ERROR
    assert found["unique_stg_orders_order_id"].passed
    related = found["relationships_stg_orders_customer_id__customer_id__ref_stg_customers_"]
    assert related.severity == dg.AssetCheckSeverity.WARN
    materialized = {e.asset_key.to_user_string() for e in ticked.get_asset_materialization_events()}
    assert materialized == keys

    rebuild = defs.resolve_job_def("shop_rebuild")
    rebuilt = rebuild.execute_in_process(
        instance=instance,
        run_config={"ops": {"shop_rebuild_op": {"config": {"views": ["customers"]}}}},
    )
    assert sorted(rebuilt.output_for_node("shop_rebuild_op")) == sorted(REBUILT)


def test_select_takes_part_of_the_project(tmp_path: Path) -> None:
    """``dbt.select`` is dbt's selection; a selected model reading one left out is an
    error naming it and the selection that takes it too."""
    files = {"models/common.sql": "select kind, n\nfrom {{ ref('counts') }}\nwhere n > 1\n"}
    write_project(tmp_path, {**MINIMAL, **files}, only=True)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("name: tiny\nwarehouse: wh\ndbt: {project: project, select: common}\n")
    with pytest.raises(ConfigError, match=re.escape("reads model counts, which `dbt.select`")):
        load_config(pipeline)
    pipeline.write_text("name: tiny\nwarehouse: wh\ndbt: {project: project, select: +common}\n")
    assert set(load_config(pipeline).config.views) == {"counts", "common"}
