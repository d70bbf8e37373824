"""What a pipeline file says about its tables, read from the config alone: which
sources and views each view reads, and an order of the views in which each comes
after the views it reads. Unknown tables and cycles are refused with their place in
the file.

No Spark here: Dagster draws an asset's lineage from these when it loads its
definitions, and ``build.py`` builds the dataflow in the same order, so the graph
Dagster shows is the one that runs. SQL is parsed with sqlglot to find the
tables a query names and to refuse, before Spark starts, what no view may say
(``plan/sql/refusals.py``).
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp

from dd_etl.pipeline.config import LoadedConfig, ViewConfig
from dd_etl.plan.sql.errors import Located, SqlError
from dd_etl.plan.sql.refusals import refuse


def referenced_tables(loaded: LoadedConfig, name: str, view: ViewConfig) -> list[str]:
    """The sources and views ``view`` reads, in the order it names them: a Python
    view's ``inputs`` (every source if it lists none), or the tables its SQL names
    outside its own CTEs. Unknown names fail with their position."""
    config = loaded.config
    known = set(config.sources) | set(config.views)
    if view.python is not None:
        inputs = list(view.inputs) if view.inputs is not None else list(config.sources)
        unknown = [i for i in inputs if i not in known]
        if unknown:
            raise loaded.error(f"views.{name}.inputs", f"unknown tables {unknown}")
        return inputs
    assert view.sql is not None
    key = f"views.{name}.sql"
    try:
        named = _named_tables(name, view.sql)
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        line = int(first.get("line", 1))
        raise loaded.error(
            key,
            f"line {line}, col {first.get('col', '?')} of the query: {first.get('description', e)}",
            line_offset=line - 1,
        ) from None
    except SqlError as e:
        line = e.line or 1
        where = f"line {line}, col {e.col} of the query" if e.line else "the query"
        raise loaded.query_error(key, f"{where}: {e.reason}", line) from None
    found: list[str] = []
    for table, line, col in named:
        if table not in known:
            raise loaded.query_error(
                key,
                f"line {line}, col {col} of the query: unknown table {table!r}; "
                f"tables are {sorted(known - {name})}",
                line,
            )
        if table not in found:
            found.append(table)
    return found


@functools.lru_cache(maxsize=4096)
def _named_tables(view: str, sql: str) -> tuple[tuple[str, int, int], ...]:
    """The tables query ``sql`` of ``view`` names outside its own CTEs, each with
    its line and column, in order; what no view may say refused. Kept per query:
    building a pipeline asks for each view's tables more than once."""
    tree = sqlglot.parse_one(sql, read="spark")
    refuse(tree, Located(view, sql, "spark"))
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return tuple(
        (table.name, *_position(sql, table))
        for table in tree.find_all(exp.Table)
        if table.name and table.name not in ctes
    )


def view_order(loaded: LoadedConfig) -> list[str]:
    """Views in an order where each comes after the views it reads; cycles refused."""
    views = loaded.config.views
    deps = {
        name: [t for t in referenced_tables(loaded, name, v) if t in views]
        for name, v in views.items()
    }
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            cycle = [*path[path.index(name) :], name]
            raise loaded.error(
                f"views.{name}", f"views read each other in a cycle: {' → '.join(cycle)}"
            )
        state[name] = "visiting"
        for d in deps[name]:
            visit(d, [*path, name])
        state[name] = "done"
        order.append(name)

    for name in views:
        visit(name, [])
    return order


def _position(sql: str, table: exp.Table) -> tuple[int, int]:
    start = table.this.meta.get("start") if isinstance(table.this, exp.Expression) else None
    if start is None:
        return 1, 1
    line = sql.count("\n", 0, start) + 1
    return line, start - (sql.rfind("\n", 0, start) + 1) + 1
