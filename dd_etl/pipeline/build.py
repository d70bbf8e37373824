"""From a pipeline file to a dataflow: sources with their schemas, views in
dependency order, and the runtime that maintains them.

Views may read sources and other views. SQL views name their tables in the
query; Python views list them in ``inputs``. Unknown tables and cycles are
refused here, at load time, with the position in the file.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType
from sqlglot import exp

from dd_etl.errors import ConfigError
from dd_etl.pipeline.config import LoadedConfig, SourceConfig, ViewConfig, load_config
from dd_etl.plan.dataflow import Collection, Dataflow, PlanError
from dd_etl.runtime import Runtime
from dd_etl.sinks import ChangeFeed, MaterializedView
from dd_etl.sources import DeltaSource, FileSource, SourceReader
from dd_etl.trace import delta_log
from dd_etl.trace.errors import TraceNotFound


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
    def warehouse(self) -> Path:
        return Path(self.loaded.resolve(self.loaded.config.warehouse))

    def materialized(self, view: str) -> MaterializedView | None:
        sink = self.loaded.config.views[view].materialize
        if sink is None:
            return None
        return MaterializedView(self.runtime, self.name, view, self.loaded.resolve(sink.path))

    def change_feed(self, view: str) -> ChangeFeed | None:
        sink = self.loaded.config.views[view].changes
        if sink is None:
            return None
        return ChangeFeed(self.runtime, self.name, view, self.loaded.resolve(sink.path))


def warehouse_of(loaded: LoadedConfig) -> Path:
    return Path(loaded.resolve(loaded.config.warehouse))


def session_for(loaded: LoadedConfig) -> SparkSession:
    from dd_etl.spark import session

    spark = loaded.config.spark
    return session(f"dd_etl-{loaded.config.name}", master=spark.master, conf=spark.conf)


def open_pipeline(file: str | Path, spark: SparkSession | None = None) -> Pipeline:
    """Load and check the pipeline file and build its dataflow (reads no source data
    for sources the warehouse already knows: their schema is the trace's)."""
    loaded = load_config(file)
    config = loaded.config
    order = view_order(loaded)
    spark = spark or session_for(loaded)
    warehouse = warehouse_of(loaded)
    flow = Dataflow(spark, warehouse, name=config.name)
    readers: dict[str, SourceReader] = {}
    tables: dict[str, Collection] = {}
    for name, source in config.sources.items():
        reader = make_reader(spark, loaded, name, source)
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
    runtime = Runtime(flow, retain_epochs=config.compaction.retain_epochs)
    return Pipeline(loaded, spark, flow, runtime, readers, tables)


def known_schema(warehouse: Path, source: str) -> StructType | None:
    """The schema the source's trace was created with, if it exists."""
    try:
        state = delta_log.load(str(warehouse / "sources" / source)).state
    except TraceNotFound:
        return None
    return StructType.fromJson(json.loads(state.schema))


def make_reader(
    spark: SparkSession, loaded: LoadedConfig, name: str, source: SourceConfig
) -> SourceReader:
    path = loaded.resolve(source.path)
    pipeline = str(loaded.file)
    if source.format == "delta":
        if source.columns is not None:
            raise loaded.error(f"sources.{name}.schema", "Delta tables carry their own schema")
        return DeltaSource(
            spark, pipeline, name, path, source.effective_mode, dict(source.storage_options)
        )
    declared = None
    if source.columns is not None:
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
        path,
        source.format,
        source.effective_mode,
        declared,
        dict(source.options),
        source.diff_column,
    )


# ------------------------------------------------------------------- views


def referenced_tables(loaded: LoadedConfig, name: str, view: ViewConfig) -> list[str]:
    """The sources and views ``view`` reads; unknown names fail with their position."""
    config = loaded.config
    known = set(config.sources) | set(config.views)
    if view.python is not None:
        inputs = list(view.inputs) if view.inputs is not None else list(config.sources)
        unknown = [i for i in inputs if i not in known]
        if unknown:
            raise loaded.error(f"views.{name}.inputs", f"unknown tables {unknown}")
        return inputs
    assert view.sql is not None
    key = f"views.{name}.sql"
    try:
        tree = sqlglot.parse_one(view.sql, read="spark")
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        line = int(first.get("line", 1))
        raise loaded.error(
            key,
            f"line {line}, col {first.get('col', '?')} of the query: {first.get('description', e)}",
            line_offset=line - 1,
        ) from None
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    found: list[str] = []
    for table in tree.find_all(exp.Table):
        if table.name in ctes or not table.name:
            continue
        if table.name not in known:
            line, col = _position(view.sql, table)
            raise ConfigError(
                loaded.file,
                key,
                f"line {line}, col {col} of the query: unknown table {table.name!r}; "
                f"tables are {sorted(known - {name})}",
                _line(loaded, key, line),
            )
        if table.name not in found:
            found.append(table.name)
    return found


def _position(sql: str, table: exp.Table) -> tuple[int, int]:
    start = table.this.meta.get("start") if isinstance(table.this, exp.Expression) else None
    if start is None:
        return 1, 1
    line = sql.count("\n", 0, start) + 1
    return line, start - (sql.rfind("\n", 0, start) + 1) + 1


def _line(loaded: LoadedConfig, key: str, query_line: int) -> int | None:
    first = loaded.line(f"{key}#value")
    return None if first is None else first + query_line - 1


def view_order(loaded: LoadedConfig) -> list[str]:
    """Views in an order where each comes after the views it reads; cycles refused."""
    views = loaded.config.views
    deps = {
        name: [t for t in referenced_tables(loaded, name, v) if t in views]
        for name, v in views.items()
    }
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = [*path[path.index(name) :], name]
            raise loaded.error(
                f"views.{name}", f"views read each other in a cycle: {' → '.join(cycle)}"
            )
        state[name] = "visiting"
        for d in deps[name]:
            visit(d, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in views:
        visit(name, [])
    return order


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
        file_line = _line(loaded, key, line) if isinstance(line, int) else loaded.line(key)
        raise ConfigError(loaded.file, key, str(e), file_line) from None
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
