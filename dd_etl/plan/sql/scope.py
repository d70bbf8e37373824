"""Column scopes: which internal column holds each SQL column, and the translation
of a scalar SQL expression into a Spark SQL string over internal columns.

Internal column names are fresh per compiled view, so the two sides of any
join never clash (a self-join reads the same table under two aliases).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sqlglot import exp

from dd_etl.plan.sql.errors import Located

SUBQUERY_TYPES = (exp.Subquery, exp.Query)
"""Nodes that open a nested query: their columns belong to another scope."""

CALL_WRAPPERS = (exp.Filter, exp.WithinGroup, exp.IgnoreNulls, exp.RespectNulls)
"""Clauses around a function that belong to its call: ``FILTER (WHERE …)``,
``WITHIN GROUP (ORDER BY …)``, ``IGNORE NULLS``."""


class Names:
    """Allocates internal column names, unique within one view."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def fresh(self, base: str) -> str:
        clean = re.sub(r"\W", "_", base).strip("_") or "c"
        if clean[0].isdigit():
            clean = f"c{clean}"
        name, i = clean, 1
        while name in self._used or name.startswith("__"):
            i += 1
            name = f"{clean}_{i}"
        self._used.add(name)
        return name

    def hidden(self, base: str) -> str:
        """A helper column (join keys, markers): ``__`` names never meet user names."""
        name, i = f"__{base}", 1
        while name in self._used:
            i += 1
            name = f"__{base}{i}"
        self._used.add(name)
        return name


@dataclass
class Scope:
    """What an expression may refer to: SQL columns ``(alias, name)`` and, after a
    GROUP BY, whole expressions (group keys, aggregates) that are now columns."""

    columns: dict[tuple[str, str], str] = field(default_factory=dict)
    replacements: list[tuple[exp.Expr, str]] = field(default_factory=list)
    grouped: bool = False  # after GROUP BY: other columns are not in scope

    @property
    def aliases(self) -> set[str]:
        return {a for a, _ in self.columns}

    def merged(self, other: Scope) -> Scope:
        return Scope({**self.columns, **other.columns}, [*self.replacements, *other.replacements])


def walk_local(node: exp.Expr) -> Iterator[exp.Expr]:
    """The nodes of ``node`` outside nested queries."""
    yield node
    for child in node.iter_expressions():
        if not isinstance(child, SUBQUERY_TYPES):
            yield from walk_local(child)


def local_columns(node: exp.Expr) -> list[exp.Column]:
    return [n for n in walk_local(node) if isinstance(n, exp.Column)]


def subqueries_of(node: exp.Expr) -> list[exp.Expr]:
    """The nested queries directly inside ``node`` (not inside one another)."""
    found: list[exp.Expr] = []

    def visit(n: exp.Expr) -> None:
        for child in n.iter_expressions():
            if isinstance(child, SUBQUERY_TYPES):
                found.append(child)
            else:
                visit(child)

    if isinstance(node, SUBQUERY_TYPES):
        return [node]
    visit(node)
    return found


def references(node: exp.Expr) -> set[str]:
    """Table aliases the expression's own columns refer to."""
    return {c.table for c in local_columns(node)}


def columns_read(tree: exp.Expr) -> dict[str, set[str]]:
    """Per table alias, the columns the whole statement reads of it (correlated
    subqueries included). An alias named in several scopes gets the union: more
    columns than needed, never fewer."""
    read: dict[str, set[str]] = {}
    for column in tree.find_all(exp.Column):
        if column.table:
            read.setdefault(column.table.lower(), set()).add(column.name.lower())
    return read


def rewrite(node: exp.Expr, replace: Callable[[exp.Expr], exp.Expr | None]) -> exp.Expr:
    """A copy of ``node`` with every subtree for which ``replace`` gives a node
    replaced by it (outermost first; replacements are not visited again)."""

    def go(n: exp.Expr) -> exp.Expr:
        hit = replace(n)
        if hit is not None:
            return hit
        for key, value in list(n.args.items()):
            if isinstance(value, exp.Expr):
                n.set(key, go(value))
            elif isinstance(value, list):
                n.set(key, [go(v) if isinstance(v, exp.Expr) else v for v in value])
        return n

    return go(node.copy())


def internal(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def translate(node: exp.Expr, scope: Scope, loc: Located) -> str:
    """The expression as Spark SQL over the scope's internal columns."""
    return rewrite(node, _resolver(scope, loc, call=False)).sql(dialect="spark")


def translate_window(call: exp.Window, scope: Scope, loc: Located) -> str:
    """A window call as Spark SQL over the scope's internal columns, without its
    ``PARTITION BY``: the reduction keyed by the partition supplies that."""
    bare = call.copy()
    bare.set("partition_by", None)
    return rewrite(bare, _resolver(scope, loc, call=True)).sql(dialect="spark")


def translate_aggregate(call: exp.Expr, scope: Scope, loc: Located) -> str:
    """An aggregate call (with the clauses of its call) as Spark SQL over the
    scope's internal columns; its arguments hold no aggregate."""
    return rewrite(call, _resolver(scope, loc, call=True)).sql(dialect="spark")


def _resolver(scope: Scope, loc: Located, call: bool) -> Callable[[exp.Expr], exp.Expr | None]:
    """``rewrite``'s replacement of SQL columns (and grouped expressions) by
    internal columns; ``call``: the root is one call, a window's or an
    aggregate's, whose function may be an aggregate."""

    def replace(n: exp.Expr) -> exp.Expr | None:
        for pattern, column in scope.replacements:
            if n == pattern:
                return internal(column)
        if isinstance(n, exp.Column):
            found = scope.columns.get((n.table, n.name))
            if found is not None:
                return internal(found)
            if scope.grouped:
                raise loc.error(
                    f"column '{n.sql()}' must appear in GROUP BY or inside an aggregate", n
                )
            raise loc.error(f"column '{n.sql()}' is not in scope here", n)
        if isinstance(n, exp.Window):
            if call and n.parent is None:
                return None
            if call:
                what = "a window function is not allowed inside a window or aggregate call"
                raise loc.error(what, n)
            raise loc.error(
                "a window function is not allowed here (filter by one with QUALIFY, "
                "or in an outer query)",
                n,
            )
        if isinstance(n, exp.AggFunc) and not (call and _applied_by_root(n)):
            raise loc.error("aggregate functions are not allowed here", n)
        if isinstance(n, SUBQUERY_TYPES):
            raise loc.unsupported("a subquery in this position", n)
        return None

    return replace


def _applied_by_root(function: exp.Expr) -> bool:
    """The function is the root call's own (the clauses of its call aside)."""
    node = function
    while isinstance(node.parent, CALL_WRAPPERS):
        node = node.parent
    parent = node.parent
    return parent is None or (isinstance(parent, exp.Window) and parent.parent is None)
