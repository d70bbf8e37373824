"""Operator schemas are remembered between builds of a pipeline: opening it again
asks Spark for none of them and builds the same plan; another context (code,
Spark, analysis settings) or a damaged file starts from nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dd_etl.pipeline.build import INFERRED_SCHEMAS_FILE, open_pipeline
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import Dataflow
from dd_etl.plan.inferred import InferredSchemas
from tests.support.many_views import ManyViews

SCHEMA = StructType([StructField("a", LongType()), StructField("b", StringType(), True)])


def source(name: str, schema: StructType = SCHEMA) -> n.Source:
    return n.Source(f"source_{name}", (), schema, name=name, key=("a",))


def test_a_saved_schema_is_found_in_its_context_only(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    key = InferredSchemas.key(("Select", {"exprs": ("a", "b")}), [source("t")])
    first = InferredSchemas(path, "context 1")
    assert first.get(key) is None
    first.put(key, SCHEMA)
    first.save()
    assert InferredSchemas(path, "context 1").get(key) == SCHEMA
    assert InferredSchemas(path, "context 2").get(key) is None


def test_the_key_is_the_definition_and_the_inputs_with_their_schemas() -> None:
    key = InferredSchemas.key(("Select", {"exprs": ("a", "b")}), [source("t")])
    assert key == InferredSchemas.key(("Select", {"exprs": ("a", "b")}), [source("t")])
    assert key != InferredSchemas.key(("Select", {"exprs": ("a",)}), [source("t")])
    assert key != InferredSchemas.key(("Select", {"exprs": ("a", "b")}), [source("u")])
    # a source whose columns changed keeps its id, not its key
    retyped = StructType([StructField("a", StringType()), StructField("b", StringType())])
    assert key != InferredSchemas.key(("Select", {"exprs": ("a", "b")}), [source("t", retyped)])


def test_a_build_keeps_only_what_it_used(tmp_path: Path) -> None:
    path = tmp_path / "schemas.json"
    old, kept = InferredSchemas.key("old", []), InferredSchemas.key("kept", [])
    first = InferredSchemas(path, "c")
    first.put(old, SCHEMA)
    first.put(kept, SCHEMA)
    first.save()
    second = InferredSchemas(path, "c")
    assert second.get(kept) == SCHEMA
    second.save()
    assert set(json.loads(path.read_text())["schemas"]) == {kept}


@pytest.mark.parametrize("content", ["", "{not json", '["a list"]', '{"context": "c"}'])
def test_a_damaged_file_is_asked_again(tmp_path: Path, content: str) -> None:
    path = tmp_path / "schemas.json"
    path.write_text(content)
    schemas = InferredSchemas(path, "c")
    assert schemas.get(InferredSchemas.key("x", [])) is None
    schemas.put(InferredSchemas.key("x", []), SCHEMA)
    schemas.save()
    assert InferredSchemas(path, "c").get(InferredSchemas.key("x", [])) == SCHEMA


@pytest.mark.spark
def test_opening_a_pipeline_again_asks_spark_for_no_schema(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = ManyViews(tmp_path, 24)
    file = views.pipeline()
    first = open_pipeline(file, spark)
    saved = json.loads((first.warehouse.path / INFERRED_SCHEMAS_FILE).read_text())
    assert len(saved["schemas"]) > 100

    def asked(*_: object) -> None:
        raise AssertionError("a schema was asked of Spark again")

    with monkeypatch.context() as m:
        m.setattr(Dataflow, "empty_updates", asked)
        again = open_pipeline(file, spark)
    assert {v: again.flow.views[v].id for v in views.view_names} == {
        v: first.flow.views[v].id for v in views.view_names
    }
    assert json.loads((first.warehouse.path / INFERRED_SCHEMAS_FILE).read_text()) == saved
