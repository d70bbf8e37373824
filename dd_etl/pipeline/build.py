"""From a pipeline file to a dataflow on Spark: sources with their schemas, views in
dependency order, and the runtime that maintains them.

Views may read sources and other views. SQL views name their tables in the
query; Python views list them in ``inputs``. Which tables a view reads and the
order views are built in come from ``analysis.py`` (config only, no Spark), which
refuses unknown tables and cycles at load time with the position in the file.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from dd_etl.lake import Location
from dd_etl.lake.probe import reachable
from dd_etl.pipeline.analysis import referenced_tables, view_order
from dd_etl.pipeline.config import (
    LoadedConfig,
    SourceConfig,
    ViewConfig,
    load_config,
    warehouse_of,
)
from dd_etl.plan.dataflow import Collection, Dataflow, PlanError
from dd_etl.plan.graph import columns_read, upstream
from dd_etl.plan.inferred import InferredSchemas, analysis_context
from dd_etl.runtime import Runtime
from dd_etl.runtime.sizing import Thresholds
from dd_etl.sinks import ChangeFeed, MaterializedView
from dd_etl.sources import DeltaSource, FileSource, SourceReader
from dd_etl.trace import delta_log
from dd_etl.trace.errors import TraceNotFound

INFERRED_SCHEMAS_FILE = "_pipeline/schemas.json"
"""The operator schemas Spark gave when the pipeline was last built
(``plan/inferred.py``): opening it again asks Spark only for what changed."""


@dataclass
class Pipeline:
    """A loaded pipeline: its config, dataflow, runtime, source readers and sinks."""

    loaded: LoadedConfig
    spark: SparkSession
    flow: Dataflow
    runtime: Runtime
    readers: dict[str, SourceReader]
    collections: dict[str, Collection]

    @property
    def name(self) -> str:
        return self.loaded.config.name

    @property
    def file(self) -> Path:
        return self.loaded.file

    @property
    def warehouse(self) -> Location:
        return warehouse_of(self.loaded)

    def materialized(self, view: str) -> MaterializedView | None:
        sink = self.loaded.config.views[view].materialize
        if sink is None:
            return None
        where = self.loaded.location(f"views.{view}.materialize.path", sink.path)
        return MaterializedView(self.runtime, self.name, view, where)

    def change_feed(self, view: str) -> ChangeFeed | None:
        sink = self.loaded.config.views[view].changes
        if sink is None:
            return None
        where = self.loaded.location(f"views.{view}.changes.path", sink.path)
        return ChangeFeed(self.runtime, self.name, view, where)


def session_for(loaded: LoadedConfig) -> SparkSession:
    from dd_etl.spark import session

    spark = loaded.config.spark
    name = f"dd_etl-{loaded.config.name}"
    return session(
        name,
        master=spark.master,
        conf=spark.conf,
        remote=spark.remote,
        object_storage=loaded.object_storage,
    )


def open_pipeline(file: str | Path, spark: SparkSession | None = None) -> Pipeline:
    """Load and check the pipeline file and build its dataflow (reads no source data
    for sources the warehouse already knows: their schema is the trace's)."""
    loaded = load_config(file)
    config = loaded.config
    order = view_order(loaded)
    reachable(warehouse_of(loaded))  # before Spark starts: a store that says no says it fast
    spark = spark or session_for(loaded)
    for where in loaded.locations():
        where.configure(spark)
    warehouse = warehouse_of(loaded)
    schemas = InferredSchemas(warehouse / INFERRED_SCHEMAS_FILE, analysis_context(spark))
    flow = Dataflow(spark, warehouse, name=config.name, schemas=schemas)
    thresholds = Thresholds(**config.sizing.settings())
    readers: dict[str, SourceReader] = {}
    tables: dict[str, Collection] = {}
    for name, source in config.sources.items():
        reader = make_reader(spark, loaded, name, source, thresholds.small_records)
        readers[name] = reader
        schema = known_schema(warehouse, name) or reader.schema()
        key = source.key
        if key is not None:
            unknown = [k for k in key if k not in schema.fieldNames()]
            if unknown:
                raise loaded.error(
                    f"sources.{name}.key", f"columns {unknown} are not in {schema.fieldNames()}"
                )
        tables[name] = flow.source(name, schema, key=key)
    for name in order:
        view = config.views[name]
        built = build_view(loaded, flow, name, view, tables)
        # compile_view registers SQL views itself; Python views are registered here
        tables[name] = built if name in flow.views else flow.view(name, built)
        flow.refresh[name] = view.refresh_policy
    nodes = upstream(list(flow.views.values()))
    for name, node in flow.sources.items():
        reader = readers[name]
        if isinstance(reader, DeltaSource):  # columns no view reads may change under it
            readers[name] = reader.reading(columns_read(node, nodes))
    schemas.save()
    runtime = Runtime(flow, config.compaction.retain_epochs, thresholds)
    return Pipeline(loaded, spark, flow, runtime, readers, tables)


def known_schema(warehouse: Location, source: str) -> StructType | None:
    """The schema the source's trace was created with, if it exists."""
    try:
        state = delta_log.load(warehouse / "sources" / source).state
    except TraceNotFound:
        return None
    return StructType.fromJson(json.loads(state.schema))


def make_reader(
    spark: SparkSession,
    loaded: LoadedConfig,
    name: str,
    source: SourceConfig,
    driver_feed: int = Thresholds.small_records,
) -> SourceReader:
    """The reader of source ``name``; a Delta source's change feed of at most
    ``driver_feed`` rows is read by the driver."""
    key = f"sources.{name}.path"
    pipeline = str(loaded.file)
    if source.format == "delta":
        if source.columns is not None:
            raise loaded.error(f"sources.{name}.schema", "Delta tables carry their own schema")
        return DeltaSource(
            spark,
            pipeline,
            name,
            loaded.location(key, source.path, source.storage_options),
            source.effective_mode,
            driver_feed,
        )
    declared = None
    if source.columns is not None and spark is not None:  # Spark parses it; ``status`` has none
        ddl = ", ".join(f"`{c}` {t}" for c, t in source.columns.items())
        try:
            parsed = StructType.fromDDL(ddl)
        except Exception as e:
            raise loaded.error(f"sources.{name}.schema", f"not a valid schema: {e}") from None
        if not isinstance(parsed, StructType):
            raise loaded.error(f"sources.{name}.schema", "give a mapping of column → type")
        declared = parsed
    return FileSource(
        spark,
        pipeline,
        name,
        loaded.location(key, source.path, source.storage_options),
        source.format,
        source.effective_mode,
        declared,
        dict(source.options),
        source.diff_column,
        shown=source.path,
    )


# ------------------------------------------------------------------- views


ViewFunction = Callable[[Dataflow, Mapping[str, Collection]], Collection]


def build_view(
    loaded: LoadedConfig,
    flow: Dataflow,
    name: str,
    view: ViewConfig,
    tables: Mapping[str, Collection],
) -> Collection:
    inputs = referenced_tables(loaded, name, view)
    visible = {t: tables[t] for t in inputs}
    if view.python is not None:
        function = import_function(loaded, name, view.python)
        try:
            result = function(flow, visible)
        except PlanError as e:
            raise loaded.error(f"views.{name}.python", f"{view.python}: {e}") from None
        if not isinstance(result, Collection):
            raise loaded.error(
                f"views.{name}.python",
                f"{view.python} returned {type(result).__name__}, not a Collection",
            )
        return result
    assert view.sql is not None
    return compile_sql(loaded, flow, name, view.sql, visible)


def compile_sql(
    loaded: LoadedConfig, flow: Dataflow, name: str, sql: str, tables: Mapping[str, Collection]
) -> Collection:
    key = f"views.{name}.sql"
    try:
        from dd_etl.plan.sql import (  # type: ignore[attr-defined,unused-ignore]
            SqlError,
            compile_view,
        )
    except ImportError:
        raise loaded.error(key, "SQL views are not available in this version of dd_etl") from None
    try:
        compiled: Collection = compile_view(flow, sql, tables, name=name)
        return compiled
    except SqlError as e:
        line = getattr(e, "line", None)
        raise loaded.query_error(key, str(e), line if isinstance(line, int) else None) from None
    except PlanError as e:
        raise loaded.error(key, str(e)) from None


def import_function(loaded: LoadedConfig, name: str, target: str) -> ViewFunction:
    """The function an import path names; the pipeline's directory is importable."""
    module_name, _, attr = target.partition(":")
    base = str(loaded.base)
    if base not in sys.path:
        sys.path.insert(0, base)
    key = f"views.{name}.python"
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise loaded.error(key, f"cannot import {module_name!r}: {e}") from None
    function: Any = getattr(module, attr, None)
    if not callable(function):
        raise loaded.error(key, f"{module_name!r} has no function {attr!r}")
    return function  # type: ignore[no-any-return]
