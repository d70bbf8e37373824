"""A dbt project as dd_etl keeps it once dbt has compiled it: its models, seeds,
sources and tests with their compiled SQL and the metadata Dagster and the run
report need. Plain data, written as JSON beside dbt's own output, so that a run
over an unchanged project neither imports nor runs dbt."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Materialized = Literal["view", "table", "incremental", "materialized_view"]
"""The model kinds that are views of the pipeline (``ephemeral`` ones are inlined
by dbt itself; ``materialized_view`` is dbt's own incrementally kept kind)."""
STORED: tuple[Materialized, ...] = ("table", "incremental", "materialized_view")
"""Model kinds dbt stores as tables: dd_etl keeps them as Delta tables."""


@dataclass(frozen=True)
class Model:
    name: str
    unique_id: str
    file: str
    """The model's file, relative to the project."""
    compiled_file: str
    """Its compiled SQL, relative to the project: the lines SQL errors name."""
    sql: str
    materialized: Materialized
    relation: str
    """The name dbt gives its relation (``schema.alias``), as other models' SQL says it."""
    schema: str
    alias: str
    location_root: str | None
    description: str
    columns: dict[str, str]
    """Column name → description."""
    tags: list[str]
    meta: dict[str, Any]
    group: str | None
    owners: list[str]
    fqn: list[str]
    config_schema: str | None
    """The ``schema`` its config sets, if any (part of its ``dagster-dbt`` key)."""
    version: str | None = None


@dataclass(frozen=True)
class Seed:
    name: str
    unique_id: str
    file: str
    """The CSV file, relative to the project."""
    relation: str
    columns: dict[str, str]
    """Column name → Spark SQL type, as ``dbt seed`` gives them on Spark."""
    delimiter: str
    description: str
    config_schema: str | None
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Source:
    unique_id: str
    source_name: str
    name: str
    relation: str
    file: str
    meta: dict[str, Any]
    description: str

    @property
    def dotted(self) -> str:
        """As a model's ``source()`` names it."""
        return f"{self.source_name}.{self.name}"

    @property
    def table_name(self) -> str:
        """The pipeline's source it is."""
        return f"{self.source_name}_{self.name}"


@dataclass(frozen=True)
class Test:
    name: str
    unique_id: str
    file: str
    compiled_file: str
    sql: str
    kind: str
    """The generic test's name (``not_null``, ``unique``, ...) or ``singular``."""
    model: str | None
    """The model, seed or source table it is attached to (its view or source name)."""
    severity: Literal["error", "warn"]
    warn_if: str
    error_if: str


@dataclass(frozen=True)
class CompiledProject:
    name: str
    """The project's name (``dbt_project.yml``)."""
    models: list[Model] = field(default_factory=list)
    seeds: list[Seed] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    tests: list[Test] = field(default_factory=list)
    relations: dict[str, str] = field(default_factory=dict)
    """Every model's and seed's relation → its name, selected or not."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> CompiledProject:
        raw = json.loads(text)
        return CompiledProject(
            name=raw["name"],
            models=[Model(**m) for m in raw["models"]],
            seeds=[Seed(**s) for s in raw["seeds"]],
            sources=[Source(**s) for s in raw["sources"]],
            tests=[Test(**t) for t in raw["tests"]],
            relations=raw["relations"],
        )
