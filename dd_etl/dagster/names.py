"""How a pipeline's parts are named in Dagster: one asset per source and view,
keyed ``[pipeline, table]`` and grouped by pipeline, so several pipelines share a
code location without clashing."""

from __future__ import annotations

import re

import dagster as dg

PIPELINE_TAG = "dd_etl/pipeline"
"""On every run that ticks a pipeline: the instance's run queue allows one at a time."""
KIND_TAG = "dd_etl/kind"
WARM_UNTIL_TAG = "dd_etl/warm_until"
"""On a scheduled tick's run: when the next tick is due (seconds since the epoch), so
the dd_etl server that runs this one keeps Spark warm until then."""
PIPELINES_ENV = "DD_ETL_PIPELINES"
"""Pipeline files (``os.pathsep``-separated) that ``dd_etl.dagster.location`` serves."""


def asset_key(pipeline: str, table: str) -> dg.AssetKey:
    return dg.AssetKey([pipeline, table])


def identifier(pipeline: str) -> str:
    """The pipeline's name as a Dagster name part (letters, digits, underscores)."""
    return re.sub(r"\W", "_", pipeline)
