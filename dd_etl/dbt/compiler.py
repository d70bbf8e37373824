"""dbt-core compiles the project, with the dbt-spark adapter.

The compile is what ``dbt compile --full-refresh`` gives, so an ``incremental``
model's SQL is its full query (``is_incremental()`` false) and every macro,
``var`` and ``ref`` is rendered by dbt itself, dispatched for Spark. dbt-spark's
``session`` method runs the few look-ups Jinja asks for (``is_incremental()``'s)
on the process's Spark session, which dbt sets to non-ANSI mode: the session's
setting is given back after. A process with no Spark yet compiles in a process
of its own, where dbt starts a small local Spark if it needs one.

The result is kept under the project's ``target/dd_etl`` by a hash of every file
of the project and of the settings: an unchanged project is read from there
without importing dbt. Refusals (``refusals.py``) are decided here, before any
Spark work of the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from dd_etl.dbt.project import CompiledProject, Model, Seed, Source, Test
from dd_etl.dbt.refusals import DbtRefusal, refusals
from dd_etl.errors import DdEtlError
from dd_etl.pipeline.config import DbtConfig

CACHE_FORMAT = 3
"""Bumped when ``CompiledProject`` changes shape: older caches are compiled again."""
OUTPUT = Path("target") / "dd_etl"
"""Under the project: dbt's target path for these compiles, and the cache."""
SKIPPED = {"target", "logs", "dbt_packages_tmp"}


class DbtError(DdEtlError):
    """dbt could not compile the project, or compiled what dd_etl cannot keep:
    ``file`` (relative to the project) and ``line`` say where, when known. Said to
    the user as a ``ConfigError`` at that place (``views.py``)."""

    exit_code = 2  # as the pipeline file's own errors

    def __init__(self, reason: str, file: str | None = None, line: int | None = None) -> None:
        self.reason = reason
        self.file = file
        self.line = line
        super().__init__(reason)


def compiled_project(project_dir: Path, config: DbtConfig) -> CompiledProject:
    """The project as dbt compiles it now: from the cache when nothing changed."""
    if not (project_dir / "dbt_project.yml").is_file():
        raise DbtError(f"{project_dir} holds no dbt_project.yml")
    output = project_dir / OUTPUT
    cache = output / f"project-{fingerprint(project_dir, config)}.json"
    if cache.is_file():
        return CompiledProject.from_json(cache.read_text())
    project = (
        _compile_here(project_dir, config) if _has_spark() else _compile_aside(project_dir, config)
    )
    output.mkdir(parents=True, exist_ok=True)
    for old in output.glob("project-*.json"):
        old.unlink(missing_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=output, delete=False, suffix=".tmp") as f:
        f.write(project.to_json())
    os.replace(f.name, cache)
    return project


def fingerprint(project_dir: Path, config: DbtConfig) -> str:
    """A hash of every file of the project (not dbt's outputs) and of the settings
    that change what dbt compiles."""
    digest = hashlib.sha256()
    settings = config.model_dump(include={"target", "schema_", "select", "exclude", "vars"})
    digest.update(json.dumps([CACHE_FORMAT, _dbt_version(), settings], sort_keys=True).encode())
    for path in sorted(_project_files(project_dir)):
        digest.update(str(path.relative_to(project_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _project_files(root: Path) -> Iterator[Path]:
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED and not d.startswith(".")]
        for name in files:
            if not name.startswith("."):
                yield Path(directory) / name


def _dbt_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{version('dbt-core')}/{version('dbt-spark')}"
    except PackageNotFoundError:
        return "absent"


# ------------------------------------------------------------------ compiling


def _has_spark() -> bool:
    """Whether this process runs a Spark driver dbt-spark's session method can use."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


def _compile_aside(project_dir: Path, config: DbtConfig) -> CompiledProject:
    """The compile, in a process of its own: the Spark dbt may start there for its
    look-ups would otherwise be the JVM this process's own session is later made
    in, launched with none of its settings."""
    request = json.dumps([str(project_dir), config.model_dump(by_alias=True)])
    done = subprocess.run(
        [sys.executable, "-m", "dd_etl.dbt.compiler"],
        input=request,
        capture_output=True,
        text=True,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise DbtError(f"compiling the project failed: {done.stderr.strip()[-2000:]}")
    answer = json.loads(lines[-1])
    if "reason" in answer:
        raise DbtError(answer["reason"], answer["file"], answer["line"])
    return CompiledProject.from_json(json.dumps(answer))


def _compile_here(project_dir: Path, config: DbtConfig) -> CompiledProject:
    return _compile(project_dir, config, project_dir / OUTPUT)


def _compile(project_dir: Path, config: DbtConfig, output: Path) -> CompiledProject:
    try:
        from dbt.cli.main import dbtRunner
    except ImportError:
        raise DbtError(
            "dbt-core and dbt-spark are not installed: install dd_etl with its dbt extra, "
            "`pip install 'dd_etl[dbt]'`"
        ) from None
    profile = yaml.safe_load((project_dir / "dbt_project.yml").read_text()).get("profile")
    with tempfile.TemporaryDirectory() as profiles, _spark_for_dbt() as parameters:
        _write_profile(Path(profiles), profile or "default", config, parameters)
        args = [
            "--project-dir", str(project_dir), "--profiles-dir", profiles,
            "--target", config.target, "--target-path", str(output),
            "--log-path", str(output / "logs"), "--quiet",
            "--no-send-anonymous-usage-stats", "--no-version-check",
        ]  # fmt: skip
        if config.vars:
            args += ["--vars", json.dumps(config.vars)]
        parsed = dbtRunner().invoke(["parse", *args])
        if not parsed.success or parsed.result is None:
            raise _failure("parse", parsed.exception)
        manifest: Any = parsed.result
        refused = refusals(manifest)
        if refused:
            raise _refused(refused)
        selection = [*(["--select", *config.select] if config.select else [])]
        selection += ["--exclude", *config.exclude] if config.exclude else []
        compiled = dbtRunner(manifest=manifest).invoke(
            ["compile", *args, *selection, "--full-refresh", "--no-populate-cache"]
        )
        if not compiled.success or compiled.result is None:
            raise _failure("compile", compiled.exception, compiled.result)
    results: Any = compiled.result
    nodes = {r.node.unique_id: r.node for r in results.results}
    refused = refusals(manifest, nodes)
    if refused:
        raise _refused(refused)
    return _project(project_dir, manifest, nodes)


@contextmanager
def _spark_for_dbt() -> Iterator[dict[str, str]]:
    """The Spark settings dbt-spark's session connection is given: the process's
    session when there is one (its ANSI setting given back after), else a small
    local one, stopped after."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        ansi = active.conf.get("spark.sql.ansi.enabled", None)
        try:
            yield {}
        finally:
            if ansi is None:
                active.conf.unset("spark.sql.ansi.enabled")
            else:
                active.conf.set("spark.sql.ansi.enabled", ansi)
        return
    try:
        yield {
            "spark.master": "local[1]",
            "spark.ui.enabled": "false",
            "spark.sql.catalogImplementation": "in-memory",
        }
    finally:
        started = SparkSession.getActiveSession()
        if started is not None:
            started.stop()


def _write_profile(
    directory: Path, profile: str, config: DbtConfig, parameters: Mapping[str, str]
) -> None:
    target = {
        "type": "spark",
        "method": "session",
        "host": "localhost",
        "schema": config.schema_,
        "server_side_parameters": dict(parameters),
    }
    document = {profile: {"target": config.target, "outputs": {config.target: target}}}
    (directory / "profiles.yml").write_text(yaml.safe_dump(document))


def _failure(step: str, exception: BaseException | None, result: Any = None) -> DbtError:
    """What dbt said when it failed, with the file it names."""
    if exception is not None:
        reason = str(exception).strip()
        node = getattr(exception, "node", None)
        return DbtError(f"dbt {step} failed: {reason}", getattr(node, "original_file_path", None))
    for r in getattr(result, "results", []):
        if str(r.status) == "error":
            return DbtError(f"dbt {step} failed: {r.message}", r.node.original_file_path)
    return DbtError(f"dbt {step} failed (its log: target/dd_etl/logs/dbt.log)")


def _refused(refused: list[DbtRefusal]) -> DbtError:
    first = refused[0]
    more = "".join(f"; {r.file}:{r.line}: {r.reason}" for r in refused[1:])
    return DbtError(first.reason + more, first.file, first.line)


# ------------------------------------------------------------ the manifest


def _project(root: Path, manifest: Any, nodes: Mapping[str, Any]) -> CompiledProject:
    by_id = {**manifest.nodes, **manifest.sources}
    models, seeds, tests = [], [], []
    for node in nodes.values():
        kind = node.resource_type
        if kind == "model" and node.config.materialized != "ephemeral":
            models.append(_model(manifest, node))
        elif kind == "seed":
            seeds.append(_seed(root, node))
        elif kind == "test":
            tests.append(_test(node, by_id))
    sources = [
        Source(
            unique_id=s.unique_id,
            source_name=s.source_name,
            name=s.name,
            relation=s.relation_name,
            file=s.original_file_path,
            meta={**s.source_meta, **s.meta},
            description=s.description or "",
        )
        for s in manifest.sources.values()
    ]
    models.sort(key=lambda m: m.name)
    seeds.sort(key=lambda s: s.name)
    tests.sort(key=lambda t: t.name)
    relations = {
        n.relation_name: n.name
        for n in manifest.nodes.values()
        if n.resource_type in ("model", "seed") and n.relation_name
    }
    name = manifest.metadata.project_name or ""
    return CompiledProject(name, models, seeds, sources, tests, relations)


def _compiled_file(node: Any) -> str:
    return str(Path(OUTPUT) / "compiled" / node.package_name / node.original_file_path)


def _owners(manifest: Any, group: str | None) -> list[str]:
    """The owner of the model's dbt group, as ``dagster-dbt`` makes it the asset's."""
    found = next((g for g in manifest.groups.values() if g.name == group), None)
    owner = None if found is None else (found.owner.email or found.owner.name)
    return [] if owner is None else [str(owner)]


def _model(manifest: Any, node: Any) -> Model:
    config = node.config
    return Model(
        name=node.name,
        unique_id=node.unique_id,
        file=node.original_file_path,
        compiled_file=_compiled_file(node),
        sql=node.compiled_code or "",
        materialized=config.materialized,
        relation=node.relation_name,
        schema=node.schema,
        alias=node.alias,
        location_root=config.get("location_root"),
        description=node.description or "",
        columns={c.name: c.description or "" for c in node.columns.values()},
        tags=list(node.tags),
        meta=dict(node.meta),
        group=node.group,
        owners=_owners(manifest, node.group),
        fqn=list(node.fqn),
        config_schema=config.schema,
        version=None if node.version is None else str(node.version),
    )


def _seed(root: Path, node: Any) -> Seed:
    config = node.config
    declared = dict(config.column_types or {})
    delimiter = config.delimiter or ","
    return Seed(
        name=node.name,
        unique_id=node.unique_id,
        file=node.original_file_path,
        relation=node.relation_name,
        columns=_seed_types(root / node.original_file_path, declared, delimiter),
        delimiter=delimiter,
        description=node.description or "",
        config_schema=config.schema,
        tags=list(node.tags),
    )


def _seed_types(path: Path, declared: Mapping[str, str], delimiter: str) -> dict[str, str]:
    """The seed's column types as ``dbt seed`` creates them on Spark: ``column_types``
    where the seed's config gives them, else what dbt's CSV type inference makes
    of the values, converted as dbt-spark converts them."""
    from dbt.adapters.spark.impl import SparkAdapter
    from dbt_common.clients.agate_helper import from_csv

    table = from_csv(str(path), list(declared), delimiter)
    return {
        name: declared.get(name) or str(SparkAdapter.convert_type(table, i))
        for i, name in enumerate(table.column_names)
    }


def _table_of(node: Any) -> str:
    """The pipeline's name of a model, seed or source table."""
    if node.resource_type == "source":
        return f"{node.source_name}_{node.name}"
    return str(node.name)


def _test(node: Any, by_id: Mapping[str, Any]) -> Test:
    config = node.config
    parents = [by_id[d] for d in node.depends_on.nodes if d in by_id]
    attached_id = getattr(node, "attached_node", None)
    attached = by_id.get(attached_id) if attached_id else None
    if attached is None and parents:
        attached = parents[-1]
    metadata = getattr(node, "test_metadata", None)
    return Test(
        name=node.name,
        unique_id=node.unique_id,
        file=node.original_file_path,
        compiled_file=_compiled_file(node),
        sql=node.compiled_code or "",
        kind="singular" if metadata is None else metadata.name,
        model=None if attached is None else _table_of(attached),
        severity="warn" if str(config.severity).lower() == "warn" else "error",
        warn_if=config.warn_if,
        error_if=config.error_if,
    )


def main() -> None:
    """``python -m dd_etl.dbt.compiler``: the project and settings (JSON) on standard
    input; the compiled project, or the error, as JSON on the last line out."""
    directory, settings = json.loads(sys.stdin.read())
    try:
        project = _compile_here(Path(directory), DbtConfig.model_validate(settings))
    except DbtError as e:
        print(json.dumps({"reason": e.reason, "file": e.file, "line": e.line}))
        return
    print(json.dumps(json.loads(project.to_json())))


if __name__ == "__main__":
    main()
