"""What Dagster shows of a dbt project's nodes, as ``dagster-dbt`` shows it by
default: a model's or seed's description, dbt group as the asset group, the
group's owner, dbt tags, column descriptions; tests as asset checks on their
model, an ``error`` test failing its check and a ``warn`` one warning."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dagster as dg

from dd_etl.dagster.names import asset_key
from dd_etl.pipeline.config import LoadedConfig

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline


def spec_fields(loaded: LoadedConfig, table: str) -> dict[str, Any] | None:
    """The ``AssetSpec`` fields of a dbt model or seed; None for other tables."""
    project = loaded.dbt
    if project is None:
        return None
    model = project.model(table)
    if model is not None:
        columns = [
            dg.TableColumn(name, type="", description=text or None)
            for name, text in model.columns.items()
        ]
        metadata: dict[str, Any] = {
            "dagster/table_name": model.relation,
            "dbt file": model.file,
            "dbt materialized": model.materialized,
        }
        if columns:
            metadata["dagster/column_schema"] = dg.TableSchema(columns=columns)
        return {
            "description": model.description or f"dbt model {model.name}",
            "group_name": model.group,
            "owners": model.owners,
            "tags": {tag: "" for tag in model.tags},
            "kinds": {"dbt", "spark"},
            "metadata": metadata,
        }
    seed = next((s for s in project.compiled.seeds if s.name == table), None)
    if seed is None:
        return None
    return {
        "description": seed.description or f"dbt seed {seed.name}",
        "group_name": None,
        "tags": {tag: "" for tag in seed.tags},
        "kinds": {"dbt", "spark"},
        "metadata": {"dagster/table_name": seed.relation, "dbt file": seed.file},
    }


def test_check_specs(loaded: LoadedConfig) -> list[dg.AssetCheckSpec]:
    """A check per dbt test, on the model (or seed, or source) it tests."""
    if loaded.dbt is None:
        return []
    return [
        dg.AssetCheckSpec(
            test.name,
            asset=asset_key(loaded, test.model),
            description=f"dbt test ({test.kind}, severity {test.severity}): {test.file}",
        )
        for test in loaded.dbt.tests
        if test.model is not None
    ]


def test_views(loaded: LoadedConfig, checks: list[str]) -> list[str]:
    """The views of the dbt tests among ``checks`` (check names)."""
    tests = set() if loaded.dbt is None else {t.name for t in loaded.dbt.tests}
    return [c for c in checks if c in tests]


def test_results(pipeline: Pipeline, tests: list[str]) -> Iterator[dg.AssetCheckResult]:
    """The tests' outcomes as their views hold them now."""
    from dd_etl.dbt.tests import outcomes

    project = pipeline.loaded.dbt
    if project is None or not tests:
        return
    chosen = [t for t in project.tests if t.name in tests and t.model is not None]
    for outcome in outcomes(chosen, pipeline.warehouse):
        test = outcome.test
        assert test.model is not None
        yield dg.AssetCheckResult(
            asset_key=asset_key(pipeline.loaded, test.model),
            check_name=test.name,
            passed=outcome.status == "pass",
            severity=dg.AssetCheckSeverity.WARN
            if test.severity == "warn"
            else dg.AssetCheckSeverity.ERROR,
            metadata={
                "failing rows": -1 if outcome.failures is None else outcome.failures,
                "status": outcome.status or "not run",
                "dbt file": test.file,
            },
        )
