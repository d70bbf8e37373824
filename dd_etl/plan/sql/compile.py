"""``compile_view``: one SQL query to one collection of the dataflow."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import functions as F
from pyspark.sql.types import NullType, StringType
from sqlglot import exp

from dd_etl.plan.column_names import column
from dd_etl.plan.dataflow import Collection, Dataflow
from dd_etl.plan.sql.errors import Located
from dd_etl.plan.sql.frontend import catalog, check_tables, parse, resolve
from dd_etl.plan.sql.refusals import refuse
from dd_etl.plan.sql.relational import Compiler
from dd_etl.plan.sql.scope import columns_read


def compile_view(
    flow: Dataflow,
    sql: str,
    tables: Mapping[str, Collection],
    name: str = "view",
    *,
    dialect: str = "spark",
    register: bool = True,
) -> Collection:
    """Compile ``sql`` (one query in ``dialect``) over ``tables`` (sources or
    earlier views, by the names the SQL uses) into a differential dataflow.

    With ``register`` the result is the view ``name`` of ``flow`` (it keeps a
    trace under ``views/<name>``); otherwise the bare collection. Raises
    ``SqlError`` at the offending construct, before any data is touched.
    """
    loc = Located(name, sql, dialect)
    tree = parse(sql, dialect, loc)
    known = catalog(tables)
    check_tables(tree, known, loc)
    refuse(tree, loc)
    tree = resolve(tree, known, dialect, loc)
    out = Compiler(flow, known, loc, columns_read(tree)).query(tree, {})
    seen: set[str] = set()
    for output, node in zip(out.names, _projections(tree), strict=False):
        if output in seen:
            raise loc.error(f"two output columns are named '{output}'; give one an alias", node)
        seen.add(output)
    schema = out.coll.node.schema
    named = {
        output: F.col(c).cast(StringType())
        if isinstance(schema[c].dataType, NullType)
        else column(c)
        for output, c in zip(out.names, out.coll.columns, strict=True)
    }
    renamed = list(out.names) != out.coll.columns
    void = any(isinstance(f.dataType, NullType) for f in schema.fields)
    result = out.coll.select(**named) if renamed or void else out.coll
    return flow.view(name, result) if register else result


def _projections(tree: exp.Expr) -> list[exp.Expr]:
    while isinstance(tree, exp.Union | exp.Except | exp.Intersect | exp.Subquery):
        tree = tree.this
    return list(tree.expressions) if isinstance(tree, exp.Select) else []
