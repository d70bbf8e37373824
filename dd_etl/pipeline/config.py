"""The pipeline file: YAML validated by pydantic models, errors pointing at the key.

    name: taxi
    warehouse: ../traces/taxi
    spark: {master: "local[*]", conf: {spark.sql.shuffle.partitions: "8"}}
    sources:
      trips: {format: delta, path: ../data/trips, key: [trip_id]}
    views:
      fares: {sql: "SELECT ...", materialize: {path: ../out/fares}}
    compaction: {retain_epochs: 5}
    sizing: {small_records: 20000}   # optional: where a run's work happens

Paths are relative to the file; a warehouse, a source or a sink may be an
object-store URI instead (``s3://bucket/prefix``), reached with the file's
``storage_options`` (``lake/options.py``). ``${NAME}`` in any string is replaced by the
environment variable ``NAME`` (an error if unset); options whose name looks like
a secret must be given that way, never as plain text. Nothing in the file is
ever executed: a Python view names a function by import path only.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from dd_etl.errors import ConfigError, ConfigProblem
from dd_etl.lake import Location, StoreOptions
from dd_etl.lake.location import LocationError
from dd_etl.plan.refresh import DEFAULT_FULL_ABOVE, Policy, RefreshPolicy
from dd_etl.spark_memory import driver_memory

if TYPE_CHECKING:
    from dd_etl.dbt.views import DbtProject

NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""Source and view names are SQL table names and directory names."""
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SECRET_NAME = re.compile(r"secret|password|passwd|token|credential|access[_.-]?key|private", re.I)
SourceName = Annotated[str, Field(pattern=NAME)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SparkSettings(_Model):
    master: str | None = None
    """``local[*]``, ``spark://host:7077`` or any cluster URL; default: local (or
    ``DD_ETL_SPARK_MASTER``)."""
    remote: str | None = None
    """A Spark Connect server, ``sc://host:port``, instead of a master;
    ``DD_ETL_SPARK_REMOTE``, if set, is used in place of a file's master."""
    conf: dict[str, str] = Field(default_factory=dict)

    def driver_memory(self) -> str:
        """The memory the pipeline's Spark driver runs with, and where it comes from."""
        if self.remote is not None:
            return "the Spark Connect server's own"
        return driver_memory(self.conf).describe()

    @model_validator(mode="after")
    def _one_spark(self) -> SparkSettings:
        if self.master is not None and self.remote is not None:
            raise ValueError("name either master (a cluster) or remote (Spark Connect), not both")
        if self.remote is not None and not self.remote.startswith("sc://"):
            raise ValueError(f"remote {self.remote!r} is not a Spark Connect URL (sc://host:port)")
        return self


class SourceConfig(_Model):
    format: Literal["delta", "parquet", "csv", "json"]
    path: str
    mode: Literal["auto", "cdf", "snapshot", "append"] | None = None
    """delta: ``auto`` (change data feed when enabled, else snapshot differencing),
    ``cdf`` or ``snapshot``; files: ``append`` (each new file is new data) or
    ``snapshot`` (the directory is the whole table, diffed against the last one)."""
    key: list[str] | None = None
    columns: dict[str, str] | None = Field(default=None, alias="schema")
    """Column name → Spark SQL type; default: read from the data."""
    options: dict[str, str] = Field(default_factory=dict)
    """Spark reader options for files (e.g. ``sep``, ``dateFormat``)."""
    storage_options: dict[str, str] = Field(default_factory=dict)
    """Object store settings of this source alone, over the pipeline's."""
    diff_column: str = "diff"
    """In files: a column of multiplicities (-1 deletes a row); absent means +1."""

    @model_validator(mode="after")
    def _mode_fits_format(self) -> SourceConfig:
        allowed = ("auto", "cdf", "snapshot") if self.format == "delta" else ("append", "snapshot")
        if self.mode is not None and self.mode not in allowed:
            raise ValueError(f"mode {self.mode!r} does not apply to {self.format}; use {allowed}")
        return self

    @property
    def effective_mode(self) -> str:
        return self.mode or ("auto" if self.format == "delta" else "append")


class SinkConfig(_Model):
    path: str


class ViewConfig(_Model):
    sql: str | None = None
    python: str | None = Field(default=None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """``package.module:function``: a function ``(flow, tables) -> Collection``."""
    inputs: list[SourceName] | None = None
    """Python views: the sources and views passed in ``tables`` (default: all sources)."""
    materialize: SinkConfig | None = None
    """A plain Delta table kept equal to the view, one commit per epoch."""
    changes: SinkConfig | None = None
    """A Delta table of the view's changes: its columns, ``_epoch``, ``_diff``."""
    description: str | None = None
    refresh: Policy = "incremental"
    """``incremental``: maintain the view from the changes, never recompute it;
    ``full``: recompute it every epoch (its operator state is not kept);
    ``auto``: recompute when the changes exceed ``full_refresh_above`` of the data
    its sources hold, else maintain it."""
    full_refresh_above: float | None = Field(default=None, gt=0)
    """``auto`` only: the share of changed to held source records above which the
    view is recomputed (default 0.5)."""

    @property
    def refresh_policy(self) -> RefreshPolicy:
        return RefreshPolicy(self.refresh, self.full_refresh_above or DEFAULT_FULL_ABOVE)

    @model_validator(mode="after")
    def _one_definition(self) -> ViewConfig:
        if (self.sql is None) == (self.python is None):
            raise ValueError("give exactly one of `sql` or `python`")
        if self.full_refresh_above is not None and self.refresh != "auto":
            raise ValueError("`full_refresh_above` applies to `refresh: auto` only")
        if self.inputs is not None and self.sql is not None:
            raise ValueError("`inputs` is for python views; SQL views name their tables")
        return self


class DbtModelConfig(_Model):
    """What the pipeline file says of one dbt model, over what its project says."""

    materialize: SinkConfig | None = None
    """Where the model's Delta table goes, in place of where dbt would put it."""
    changes: SinkConfig | None = None
    """A Delta table of the model's changes, as a view's ``changes``."""
    refresh: Policy | None = None
    """As a view's ``refresh``; default ``incremental``."""


class DbtConfig(_Model):
    """A dbt project whose models, seeds and tests are views of the pipeline."""

    project: str
    """The project's directory (holding ``dbt_project.yml``), relative to the file."""
    target: str = "dd_etl"
    """The target name the project's Jinja sees (``target.name``)."""
    schema_: str = Field(default="analytics", alias="schema")
    """The target's schema (``target.schema``): models' relations and, with no
    ``location_root``, their tables' directories under ``tables``."""
    select: list[str] = Field(default_factory=list)
    """dbt node selection (``--select``); default: every model, seed and test."""
    exclude: list[str] = Field(default_factory=list)
    vars: dict[str, Any] = Field(default_factory=dict)
    """Over the project's ``vars``, as ``dbt --vars`` gives them."""
    tables: str = "tables"
    """Where ``table``, ``incremental`` and ``materialized_view`` models without a
    ``location_root`` are kept: ``<tables>/<schema>/<alias>``."""
    models: dict[SourceName, DbtModelConfig] = Field(default_factory=dict)

    @field_validator("select", "exclude", mode="before")
    @classmethod
    def _as_list(cls, v: Any) -> Any:
        return v.split() if isinstance(v, str) else v


class CompactionConfig(_Model):
    retain_epochs: int | None = Field(default=None, ge=0)
    """Past epochs of each view kept readable (``read --as-of``, ``changes``)."""
    fuel: int | None = Field(default=None, ge=1)
    """Records of merge work per trace for ``compact`` (default: until settled)."""
    retention_hours: float = Field(default=24.0, ge=0)
    """Files unreachable for this long are deleted by ``compact``."""


class SizingConfig(_Model):
    """Where a run's work happens, by how much it reads: the defaults suit most
    pipelines; lower ones make small data take the paths of large data (Spark
    writing the batches, merging the spines, merging into materialized tables)."""

    small_records: int | None = Field(default=None, ge=0)
    """A run taking in at most this many source records computes in the driver's
    placement, a layer in as few Spark jobs as memory allows (default 20,000)."""
    small_bytes: int | None = Field(default=None, ge=0)
    """A source's new data of at most this many bytes, as Spark estimates them, is
    taken in by the driver (default 2 MiB)."""
    medium_share: float | None = Field(default=None, ge=0)
    """A larger run taking in at most this share of the records its views hold
    looks up the history of the keys it changes (default 0.25)."""
    driver_merge_records: int | None = Field(default=None, ge=0)
    """A trace's merge step of at most this many records is made by the driver,
    a larger one by Spark (default 20,000)."""
    rewrite_records: int | None = Field(default=None, ge=0)
    """A materialized table of a view of at most this many records is rewritten
    whole; a larger one takes the view's changes by a Delta MERGE (default 25 M)."""
    store_rewrite_bytes: int | None = Field(default=None, ge=0)
    """On an object store, a materialized table is rewritten whole only while its
    files hold at most this many bytes (default 16 MiB)."""

    def settings(self) -> dict[str, Any]:
        """The sizes the file sets, by name."""
        return self.model_dump(exclude_none=True)


class PipelineConfig(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    warehouse: str
    storage_options: dict[str, str] = Field(default_factory=dict)
    """Object store settings (delta-rs names: ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
    ``AWS_ACCESS_KEY_ID``, ...; secrets as ``${ENV}``) for the warehouse, every
    source and every sink, over the standard AWS environment variables."""
    allow_unsafe_store: bool = False
    """Let a warehouse live on a store without conditional writes: safe only while
    no two writers ever run at once (every run checks the store otherwise)."""
    spark: SparkSettings = Field(default_factory=SparkSettings)
    sources: dict[SourceName, SourceConfig] = Field(default_factory=dict)
    views: dict[SourceName, ViewConfig] = Field(default_factory=dict)
    dbt: DbtConfig | None = None
    """A dbt project whose models are views beside ``views`` (``dd_etl/dbt``)."""
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    sizing: SizingConfig = Field(default_factory=SizingConfig)

    @model_validator(mode="after")
    def _names_unique(self) -> PipelineConfig:
        if not self.sources and self.dbt is None:
            raise ValueError("a pipeline needs at least one source")
        both = sorted(set(self.sources) & set(self.views))
        if both:
            raise ValueError(f"{both} name both a source and a view")
        return self


@dataclass(frozen=True)
class Origin:
    """Where a view not written in the pipeline file is defined: a dbt model's or
    test's file, and the compiled SQL whose lines a query's errors name."""

    what: str
    """How its author names it: ``model orders``, ``test unique_orders_order_id``."""
    file: Path
    compiled: Path

    def error(self, reason: str, query_line: int | None = None) -> ConfigError:
        if query_line is None:
            return ConfigError(self.file, self.what, reason)
        return ConfigError(self.compiled, self.what, reason, query_line)


class LoadedConfig:
    """A validated pipeline file, with paths resolved against its directory, and
    the views it takes from a dbt project (``origins`` says where each is defined;
    ``dbt`` is the project as compiled)."""

    def __init__(
        self,
        file: Path,
        config: PipelineConfig,
        lines: dict[str, int],
        origins: Mapping[str, Origin] | None = None,
        dbt: DbtProject | None = None,
    ) -> None:
        self.file = file
        self.config = config
        self._lines = lines
        self.origins = dict(origins or {})
        self.dbt = dbt

    @property
    def base(self) -> Path:
        return self.file.parent

    def extended(
        self, config: PipelineConfig, origins: Mapping[str, Origin], dbt: DbtProject
    ) -> LoadedConfig:
        """The file with views and sources defined elsewhere added to ``config``."""
        return LoadedConfig(self.file, config, self._lines, {**self.origins, **origins}, dbt)

    def resolve(self, path: str) -> str:
        """A path of the file, made absolute; URLs (``s3://…``) are kept as they are."""
        if "://" in path:
            return path
        return str((self.base / path).resolve())

    def location(self, key: str, path: str, own: Mapping[str, str] | None = None) -> Location:
        """Where the file's ``key`` (its value ``path``) points, with the settings that
        reach it: ``own`` over the file's ``storage_options`` over the environment's."""
        options = StoreOptions.of(self.config.storage_options).over(StoreOptions.from_environment())
        try:
            return Location.of(self.resolve(path), StoreOptions.of(own or {}).over(options))
        except LocationError as e:
            raise self.error(key, str(e)) from None

    def locations(self) -> list[Location]:
        """Every place the file names: the warehouse, each source, each sink."""
        c = self.config
        found = [self.location("warehouse", c.warehouse)]
        for name, source in c.sources.items():
            found.append(self.location(f"sources.{name}.path", source.path, source.storage_options))
        for name, view in c.views.items():
            for kind, sink in (("materialize", view.materialize), ("changes", view.changes)):
                if sink is not None:
                    found.append(self.location(f"views.{name}.{kind}.path", sink.path))
        return found

    @property
    def object_storage(self) -> bool:
        """Whether the pipeline reaches an object store (Spark then needs its jars)."""
        return not all(where.is_local for where in self.locations())

    def line(self, key: str) -> int | None:
        return self._lines.get(key)

    def error(self, key: str, reason: str, line_offset: int = 0) -> ConfigError:
        origin = self._origin(key)
        if origin is not None:
            return origin.error(reason, line_offset + 1 if line_offset else None)
        line = self.line(key)
        return ConfigError(self.file, key, reason, None if line is None else line + line_offset)

    def query_error(self, key: str, reason: str, query_line: int | None) -> ConfigError:
        """An error at line ``query_line`` (when known) of the query at ``key``."""
        origin = self._origin(key)
        if origin is not None:
            return origin.error(reason, query_line)
        first = self.line(f"{key}#value")
        if first is None or query_line is None:
            return ConfigError(self.file, key, reason, self.line(key))
        return ConfigError(self.file, key, reason, first + query_line - 1)

    def _origin(self, key: str) -> Origin | None:
        parts = key.split(".")
        return self.origins.get(parts[1]) if len(parts) > 1 and parts[0] == "views" else None


def warehouse_of(loaded: LoadedConfig) -> Location:
    """Where the pipeline keeps its traces: the file's ``warehouse``, resolved."""
    return loaded.location("warehouse", loaded.config.warehouse)


def load_config(file: str | Path) -> LoadedConfig:
    """The pipeline file, validated: every problem found is raised in one
    ``ConfigError``, unknown keys first (a misspelt key also makes the key it
    was meant to be missing, and the spelling is the problem to fix)."""
    path = Path(file)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(path, "", f"cannot read the pipeline file: {e.strerror}") from None
    try:
        raw = yaml.safe_load(text)
        lines = dict(_key_lines(yaml.compose(text)))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        raise ConfigError(path, "", f"not valid YAML: {getattr(e, 'problem', e)}", line) from None
    if not isinstance(raw, dict):
        raise ConfigError(path, "", "the file must be a mapping with `name`, `sources`, `views`")
    problems = list(_plain_secrets(raw, lines))
    data = _interpolate(raw, (), lines, problems)
    unknown: list[ConfigProblem] = []
    try:
        config = PipelineConfig.model_validate(data)
    except ValidationError as e:
        for error in e.errors():
            kind = unknown if error["type"] == "extra_forbidden" else problems
            kind.append(_problem(error, lines))
    if unknown or problems:
        first, *more = [*_in_file_order(unknown), *_in_file_order(problems)]
        raise ConfigError(path, first.key, first.reason, first.line, more)
    loaded = LoadedConfig(path.resolve(), config, lines)
    if config.dbt is None:
        return loaded
    from dd_etl.dbt.views import with_dbt_project

    return with_dbt_project(loaded, config.dbt)


def _problem(error: ErrorDetails, lines: dict[str, int]) -> ConfigProblem:
    """A pydantic error as a problem of the file, at the key it is about."""
    loc = error["loc"]
    key = ".".join(str(p) for p in loc)
    reason = error["msg"]
    if error["type"] == "extra_forbidden":
        reason = f"unknown key {loc[-1]!r} ({_hint(loc)})"
    if error["type"] == "missing":
        reason = "required key is missing"
    return ConfigProblem(key, reason, _nearest_line(lines, key))


def _in_file_order(problems: list[ConfigProblem]) -> list[ConfigProblem]:
    """``problems`` by line (those without one last), as the reader meets them."""
    return sorted(problems, key=lambda p: float("inf") if p.line is None else p.line)


def _hint(loc: tuple[int | str, ...]) -> str:
    """What to do about the unknown key at ``loc``: the known key it is nearest,
    if one is close enough to be a misspelling of it."""
    known = _known_keys(PipelineConfig, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    if known:
        return f"check its spelling and place; known keys here: {', '.join(known)}"
    return "check its spelling and place"


def _known_keys(model: Any, loc: tuple[int | str, ...]) -> list[str]:
    """The keys the mapping at ``loc`` (below ``model``) may hold: its model's
    fields, by the names the file uses (``schema``, not ``columns``)."""
    for part in loc:
        model = _inner(_unwrapped(model), part)
    model = _unwrapped(model)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _inner(model: Any, part: int | str) -> Any:
    """The type of the value at ``part`` of a value of type ``model`` (a model's
    field, a mapping's value, a list's item); None when there is none."""
    if isinstance(model, type) and issubclass(model, BaseModel):
        for name, field in model.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    origin = get_origin(model)
    if origin is dict:
        return get_args(model)[1]
    if origin is list:
        return get_args(model)[0]
    return None


def _unwrapped(model: Any) -> Any:
    """``model`` without ``Annotated`` and without ``| None``."""
    origin = get_origin(model)
    if origin is Annotated:
        return _unwrapped(get_args(model)[0])
    if origin in (Union, UnionType):
        types = [t for t in get_args(model) if t is not type(None)]
        return _unwrapped(types[0]) if len(types) == 1 else None
    return model


def _key_lines(node: yaml.Node | None, prefix: str = "") -> Iterator[tuple[str, int]]:
    """The line of every key path (``views.fares.sql``); for a value, where it starts."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = f"{prefix}.{k.value}" if prefix else str(k.value)
            yield key, k.start_mark.line + 1
            if isinstance(v, yaml.ScalarNode) and v.style in ("|", ">"):
                yield f"{key}#value", v.start_mark.line + 2  # block scalar text starts below
            else:
                yield f"{key}#value", v.start_mark.line + 1
            yield from _key_lines(v, key)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            key = f"{prefix}.{i}"
            yield key, v.start_mark.line + 1
            yield from _key_lines(v, key)


def _nearest_line(lines: dict[str, int], key: str) -> int | None:
    parts = key.split(".")
    while parts:
        line = lines.get(".".join(parts))
        if line is not None:
            return line
        parts.pop()
    return None


def _plain_secrets(raw: Any, lines: dict[str, int], prefix: str = "") -> Iterator[ConfigProblem]:
    """Options named like secrets whose value is not an environment reference."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, str) and SECRET_NAME.search(str(k)) and not ENV_REFERENCE.fullmatch(v):
                yield ConfigProblem(
                    key,
                    "looks like a secret: give it as an environment variable reference, "
                    "e.g. `${MY_SECRET}`, never as plain text",
                    lines.get(key),
                )
            yield from _plain_secrets(v, lines, key)
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            yield from _plain_secrets(v, lines, f"{prefix}.{i}")


def _interpolate(
    raw: Any, at: tuple[str, ...], lines: dict[str, int], problems: list[ConfigProblem]
) -> Any:
    """``raw`` with ``${NAME}`` replaced by the environment's values; a variable not
    set is added to ``problems`` and its reference left as it is, so that the
    rest of the file is still checked."""
    if isinstance(raw, dict):
        return {k: _interpolate(v, (*at, str(k)), lines, problems) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_interpolate(v, (*at, str(i)), lines, problems) for i, v in enumerate(raw)]
    if isinstance(raw, bool | int | float) and len(at) >= 2 and at[-2] in ("conf", "options"):
        return str(raw).lower() if isinstance(raw, bool) else str(raw)  # Spark conf is text
    if not isinstance(raw, str):
        return raw

    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in os.environ:
            key = ".".join(at)
            reason = f"environment variable {name} is not set"
            problems.append(ConfigProblem(key, reason, lines.get(key)))
            return m.group(0)
        return os.environ[name]

    return ENV_REFERENCE.sub(value, raw)
