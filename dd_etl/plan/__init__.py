"""Dataflow graphs: the Python collection API, and SQL compiled to it.

``Collection`` and ``Dataflow`` are imported on first use, so that reading a pipeline
file, which needs only ``refresh`` (the refresh policy of a view), imports no Spark.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dd_etl.plan.dataflow import Collection, Dataflow

__all__ = ["Collection", "Dataflow"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("dd_etl.plan.dataflow"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
