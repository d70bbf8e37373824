"""A compiled dbt project as sources and views of the pipeline.

- A model (``view``, ``table``, ``incremental``, ``materialized_view``) is a view of
  its name; the stored kinds are kept as Delta tables at ``<location_root>/<alias>``
  when the model sets ``location_root`` (where dbt-spark puts them), else at
  ``<dbt.tables>/<schema>/<alias>``, unless ``dbt.models`` says otherwise.
- A seed is a CSV source, the file being the whole table (an edit is a difference),
  its column types those ``dbt seed`` gives on Spark.
- A source table ``raw.orders`` is the pipeline file's source ``raw_orders``, or
  the one its ``meta: {dd_etl: {format: ..., path: ...}}`` describes (paths
  relative to the project), named so too: models are often named as the tables
  their staging views read.
- A test is a view of its failing rows; ``tests.py`` reads them as ``dbt test`` does.

dbt writes a relation (``analytics.orders``) where a model says ``ref('orders')``;
each is replaced, in place, by the name of the view or source it is, so that the
compiled SQL's lines are the lines errors name.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from pydantic import ValidationError
from sqlglot import exp

from dd_etl.dbt.compiler import OUTPUT, DbtError, compiled_project
from dd_etl.dbt.project import STORED, CompiledProject, Model, Seed, Test
from dd_etl.errors import ConfigError
from dd_etl.pipeline.config import (
    DbtConfig,
    LoadedConfig,
    Origin,
    SinkConfig,
    SourceConfig,
    ViewConfig,
)


@dataclass(frozen=True)
class DbtProject:
    """The project a pipeline's views come from: where it is and what dbt compiled."""

    directory: Path
    compiled: CompiledProject
    config: DbtConfig

    @property
    def tests(self) -> list[Test]:
        return self.compiled.tests

    def model(self, view: str) -> Model | None:
        return next((m for m in self.compiled.models if m.name == view), None)

    def asset_key(self, table: str) -> list[str] | None:
        """The key ``dagster-dbt`` gives the node ``table`` is by default: a source's
        ``[source, table]``, a versioned model's ``[alias]``, else ``[schema, name]``
        when its config sets a schema, ``[name]`` when not; None for tables that are
        not the project's."""
        compiled = self.compiled
        for source in compiled.sources:
            if source.table_name == table:
                return [source.source_name, source.name]
        model = self.model(table)
        if model is not None and model.version is not None:
            return [model.alias]
        node = model or next((s for s in compiled.seeds if s.name == table), None)
        if node is None:
            return None
        return [node.config_schema, node.name] if node.config_schema else [node.name]


def with_dbt_project(loaded: LoadedConfig, config: DbtConfig) -> LoadedConfig:
    """``loaded`` with the project's seeds and sources among its sources and its
    models and tests among its views."""
    directory = Path(loaded.resolve(config.project))
    try:
        compiled = compiled_project(directory, config)
    except DbtError as e:
        file = directory / e.file if e.file else directory / "dbt_project.yml"
        raise ConfigError(file, "", e.reason, e.line) from None
    project = DbtProject(directory, compiled, config)
    sources = dict(loaded.config.sources)
    views = dict(loaded.config.views)
    origins: dict[str, Origin] = {}
    names = _Names(loaded, project)
    for seed in compiled.seeds:
        names.claim(seed.name, f"seed {seed.name}", seed.file)
        sources[seed.name] = _seed_source(directory, seed)
    for source in compiled.sources:
        if source.table_name in sources:
            continue
        own = source.meta.get("dd_etl")
        if isinstance(own, Mapping):
            names.claim(source.table_name, f"source {source.dotted}", source.file)
            sources[source.table_name] = _described_source(directory, source.file, own)
    for model in compiled.models:
        names.claim(model.name, f"model {model.name}", model.file)
    for test in compiled.tests:
        names.claim(test.name, f"test {test.name}", test.file)
    for model in compiled.models:
        origin = Origin(
            f"model {model.name}", directory / model.file, directory / model.compiled_file
        )
        origins[model.name] = origin
        views[model.name] = _model_view(loaded, config, model, names.sql(model.sql, origin))
    for test in compiled.tests:
        origin = Origin(f"test {test.name}", directory / test.file, directory / test.compiled_file)
        origins[test.name] = origin
        views[test.name] = ViewConfig(
            sql=names.sql(test.sql, origin), description=f"Failing rows of dbt test {test.name}."
        )
    unused = sorted(set(config.models) - {m.name for m in compiled.models})
    if unused:
        raise loaded.error(f"dbt.models.{unused[0]}", f"no model {unused[0]} in the project")
    updated = loaded.config.model_copy(update={"sources": sources, "views": views})
    return loaded.extended(updated, origins, project)


class _Names:
    """The table names of the pipeline, and the relation each dbt node is read by."""

    def __init__(self, loaded: LoadedConfig, project: DbtProject) -> None:
        self.project = project
        self.taken = {n: "a source of the pipeline file" for n in loaded.config.sources}
        self.taken |= {n: "a view of the pipeline file" for n in loaded.config.views}
        compiled = project.compiled
        self.relations = {_normal(r): name for r, name in compiled.relations.items()}
        for source in compiled.sources:
            self.relations[_normal(source.relation)] = source.table_name
        self.source_files = {_normal(s.relation): s for s in compiled.sources}

    def claim(self, name: str, what: str, file: str) -> None:
        if name in self.taken:
            raise ConfigError(
                self.project.directory / file,
                what,
                f"{name} is also {self.taken[name]}: rename one of them",
            )
        self.taken[name] = what

    def sql(self, compiled: str, origin: Origin) -> str:
        """``compiled`` with each relation dbt wrote replaced by its table's name."""
        try:
            tree = sqlglot.parse_one(compiled, read="spark")
        except sqlglot.errors.ParseError as e:
            first = e.errors[0] if e.errors else {}
            line = int(first.get("line", 1))
            raise origin.error(
                f"not SQL Spark reads: {first.get('description', e)}", line
            ) from None
        spans: list[tuple[int, int, str]] = []
        for table in tree.find_all(exp.Table):
            if not table.args.get("db"):
                continue
            relation = _normal(".".join(p.name for p in table.parts))
            name = self.relations.get(relation)
            line = table.this.meta.get("line")
            if name is None:
                raise origin.error(
                    f"reads {relation}, which is no model, seed or source of the project",
                    line,
                )
            if relation in self.source_files and name not in self.taken:
                source = self.source_files[relation]
                raise origin.error(
                    f"reads source {source.dotted}, which the pipeline does not have: add "
                    f"`{source.table_name}` to the pipeline file's sources, or "
                    f"`meta: {{dd_etl: {{format: ..., path: ...}}}}` to the source table "
                    f"({source.file})",
                    line,
                )
            if name not in self.taken:
                raise origin.error(
                    f"reads model {name}, which `dbt.select` leaves out: select it too "
                    f"(`+{origin.what.split()[-1]}` selects a model with all it reads), or "
                    f"give the pipeline file a source named {name}",
                    line,
                )
            spans.append((*_span(compiled, table), name))
        for start, end, name in sorted(spans, reverse=True):
            compiled = compiled[:start] + name + compiled[end:]
        return compiled


def _normal(relation: str) -> str:
    return relation.replace("`", "").replace('"', "").lower()


def _span(sql: str, table: exp.Table) -> tuple[int, int]:
    """Where the qualified name of ``table`` is written in ``sql``, quotes included."""
    first = next(p for p in table.parts if p.meta.get("start") is not None)
    start, end = first.meta["start"], table.this.meta["end"] + 1
    if start > 0 and sql[start - 1] == "`":
        start -= 1
    if end < len(sql) and sql[end] == "`":
        end += 1
    return start, end


def _model_view(loaded: LoadedConfig, config: DbtConfig, model: Model, sql: str) -> ViewConfig:
    own = config.models.get(model.name)
    materialize = own.materialize if own and own.materialize else None
    if materialize is None and model.materialized in STORED:
        if model.location_root:
            where = f"{model.location_root.rstrip('/')}/{model.alias}"
        else:
            where = str(Path(loaded.resolve(config.tables)) / model.schema / model.alias)
        materialize = SinkConfig(path=where)
    return ViewConfig(
        sql=sql,
        materialize=materialize,
        changes=own.changes if own else None,
        description=model.description or None,
        refresh=own.refresh if own and own.refresh else "incremental",
    )


def _seed_source(directory: Path, seed: Seed) -> SourceConfig:
    """The seed's file as a directory of one file whose name changes with its
    content: the directory is the seed's whole table, so an edit is a difference."""
    file = directory / seed.file
    content = file.read_bytes()
    held = directory / OUTPUT / "seeds" / seed.name
    kept = held / f"{hashlib.sha256(content).hexdigest()[:16]}.csv"
    if not kept.exists():
        held.mkdir(parents=True, exist_ok=True)
        aside = kept.with_suffix(".tmp")
        shutil.copyfile(file, aside)
        aside.replace(kept)
        for other in held.glob("*.csv"):
            if other != kept:
                other.unlink()
    return SourceConfig(
        format="csv",
        path=str(held),
        mode="snapshot",
        schema=dict(seed.columns),
        options={"sep": seed.delimiter},
    )


def _described_source(directory: Path, file: str, own: Mapping[str, object]) -> SourceConfig:
    settings = dict(own)
    path = settings.get("path")
    if isinstance(path, str) and "://" not in path:
        settings["path"] = str((directory / path).resolve())
    try:
        return SourceConfig.model_validate(settings)
    except ValidationError as e:
        raise ConfigError(directory / file, "meta.dd_etl", str(e).splitlines()[0]) from None
