"""How a pipeline's parts are named in Dagster: one asset per source and view,
keyed ``[pipeline, table]`` and grouped by pipeline, so several pipelines share a
code location without clashing. A dbt project's models, seeds and sources are
keyed as ``dagster-dbt`` keys them, so that a project moving from it keeps its
assets' keys and lineage; its tests are checks on their models, not assets."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from dd_etl.pipeline.config import LoadedConfig

PIPELINE_TAG = "dd_etl/pipeline"
"""On every run that ticks a pipeline: the instance's run queue allows one at a time."""
KIND_TAG = "dd_etl/kind"
WARM_UNTIL_TAG = "dd_etl/warm_until"
"""On a scheduled tick's run: when the next tick is due (seconds since the epoch), so
the dd_etl server that runs this one keeps Spark warm until then."""
PIPELINES_ENV = "DD_ETL_PIPELINES"
"""Pipeline files (``os.pathsep``-separated) that ``dd_etl.dagster.location`` serves."""


def asset_key(loaded: LoadedConfig, table: str) -> dg.AssetKey:
    dbt = loaded.dbt
    found = None if dbt is None else dbt.asset_key(table)
    return dg.AssetKey(found or [loaded.config.name, table])


def asset_views(loaded: LoadedConfig) -> list[str]:
    """The views that are assets: all but a dbt project's tests."""
    tests = set() if loaded.dbt is None else {t.name for t in loaded.dbt.tests}
    return [v for v in loaded.config.views if v not in tests]


def identifier(pipeline: str) -> str:
    """The pipeline's name as a Dagster name part (letters, digits, underscores)."""
    return re.sub(r"\W", "_", pipeline)
