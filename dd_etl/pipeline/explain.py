"""``explain``: the differential plan that maintains a view of a pipeline."""

from __future__ import annotations

from dd_etl.pipeline.build import Pipeline
from dd_etl.plan.dataflow import PlanError
from dd_etl.plan.sql import explain


def explain_view(pipeline: Pipeline, view: str) -> str:
    if view not in pipeline.flow.views:
        raise PlanError(f"unknown view {view!r}; views are {sorted(pipeline.flow.views)}")
    policy = pipeline.flow.refresh_policy(view).describe()
    memory = pipeline.loaded.config.spark.driver_memory()
    return f"{explain(pipeline.collections[view])}\nrefresh {policy}\nspark driver memory {memory}"
