"""SQL views compiled into differential dataflows (with sqlglot).

view = compile_view(flow, "SELECT pc, SUM(fare) FROM trips GROUP BY pc", {"trips": trips},
                    name="fares")
print(explain(view))
"""

from dd_etl.plan.sql.compile import compile_view
from dd_etl.plan.sql.errors import SqlError
from dd_etl.plan.sql.explain import explain

__all__ = ["SqlError", "compile_view", "explain"]
