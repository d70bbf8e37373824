"""From SQL text to a qualified statement: parse, check every table, then let
sqlglot's ``qualify`` resolve every column against the tables' schemas (stars
expanded, USING made explicit, every projection named). Errors point at the
construct in the text as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, ParseError
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from dd_etl.plan.dataflow import Collection
from dd_etl.plan.sql.errors import Located

CLAUSES = (exp.Select, exp.Where, exp.Having, exp.Group, exp.Order, exp.Join, exp.From)


@dataclass(frozen=True)
class Table:
    """A relation the view may read: a source or an earlier view."""

    name: str
    collection: Collection
    columns: dict[str, str]  # normalized (lower-case) name -> the collection's column


def catalog(tables: Mapping[str, Collection]) -> dict[str, Table]:
    """The tables by normalized name (SQL identifiers are case-insensitive unless quoted)."""
    return {
        name.lower(): Table(name, c, {col.lower(): col for col in c.columns})
        for name, c in tables.items()
    }


def item_of(node: exp.Expr) -> exp.Expr:
    """The clause item (projection, condition, key) a node belongs to: what an
    error quotes so the reader recognises it."""
    while node.parent is not None and not isinstance(node.parent, CLAUSES):
        if isinstance(node.parent, exp.Alias):
            return node
        node = node.parent
    return node


def parse(sql: str, dialect: str, loc: Located) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except ParseError as e:
        detail = e.errors[0] if e.errors else {}
        line, col = detail.get("line"), detail.get("col")
        desc = detail.get("description") or str(e)
        from dd_etl.plan.sql.errors import SqlError

        raise SqlError(loc.view, f"cannot parse: {desc}", line, col) from e
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise loc.error("a view is one SELECT query (or a set operation of queries)")
    return statements[0]


def check_tables(tree: exp.Expr, tables: Mapping[str, Table], loc: Located) -> None:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for table in tree.find_all(exp.Table):
        name = table.name.lower()
        if table.args.get("db") or table.args.get("catalog"):
            raise loc.error(
                f"unknown table '{table.sql()}' (qualified names are not tables here)", table
            )
        if name not in tables and name not in ctes:
            known = ", ".join(sorted(t.name for t in tables.values())) or "none"
            raise loc.error(f"unknown table '{table.name}' (tables: {known})", table)


UNKNOWN_COLUMN = [
    re.compile(r"Column '([^']+)' could not be resolved(?: for table: '([^']+)')?"),
    re.compile(r"Unknown column: (\S+)"),
    re.compile(r"Ambiguous column '?([^'\s]+)'?"),
]


def resolve(tree: exp.Expr, tables: Mapping[str, Table], dialect: str, loc: Located) -> exp.Expr:
    """The qualified statement; unknown or ambiguous columns become located errors."""
    schema = MappingSchema(
        {
            key: {
                c: t.collection.node.schema[c].dataType.simpleString() for c in t.collection.columns
            }
            for key, t in tables.items()
        },
        dialect="spark",
    )
    original = tree.copy()
    try:
        return qualify(
            tree,
            schema=schema,
            dialect=dialect,
            validate_qualify_columns=True,
            quote_identifiers=False,
        )
    except OptimizeError as e:
        raise _column_error(str(e), original, loc) from e


def _column_error(message: str, original: exp.Expr, loc: Located) -> Exception:
    for pattern in UNKNOWN_COLUMN:
        m = pattern.search(message)
        if not m:
            continue
        name = m.group(1).strip('"`').lower()
        table = (m.group(2) or "").lower() if m.lastindex and m.lastindex >= 2 else ""
        kind = "ambiguous" if "Ambiguous" in message else "unknown"
        for column in original.find_all(exp.Column):
            if column.name.lower() == name and (not table or column.table.lower() == table):
                return loc.error(f"{kind} column '{column.sql()}'", item_of(column), column)
        return loc.error(f"{kind} column '{name}'")
    return loc.error(f"cannot resolve the query: {message}")
