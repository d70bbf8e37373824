"""SQL views compiled into differential dataflows (with sqlglot).

view = compile_view(flow, "SELECT pc, SUM(fare) FROM trips GROUP BY pc", {"trips": trips},
                    name="fares")
print(explain(view))

The compiler is imported on first use, so that reading a pipeline file, which
refuses what no view may say (``refusals``) before Spark starts, imports no Spark.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dd_etl.plan.sql.compile import compile_view
    from dd_etl.plan.sql.errors import SqlError
    from dd_etl.plan.sql.explain_tree import explain

__all__ = ["SqlError", "compile_view", "explain"]
_HOMES = {"SqlError": "errors", "compile_view": "compile", "explain": "explain_tree"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f"dd_etl.plan.sql.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
