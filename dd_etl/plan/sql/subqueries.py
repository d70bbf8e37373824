"""Subqueries, correlated or not, decorrelated into joins.

A correlated subquery may refer to the outer query only through equalities
``inner = outer`` in its WHERE clause. Those become join keys: the subquery is
compiled without them, with its side of each equality as extra leading output
columns (and, for an aggregate without GROUP BY, grouped by them), and joined
to the outer relation on the keys. Uncorrelated subqueries join on a constant.

- In a WHERE conjunct, ``EXISTS``/``IN`` are semijoins and ``NOT EXISTS`` an
  antijoin: rows keep their own multiplicity.
- Anywhere else (and ``NOT IN``), a subquery becomes columns of a left join
  that give its SQL value: ``EXISTS`` a marker; ``x IN (S)`` three-valued from a
  marker of a match and the count of rows and of NULLs in ``S`` (``NOT IN``
  over a set holding a NULL is never true); a scalar subquery its value, or,
  for an aggregate over no rows, the aggregate's value on empty input (COUNT 0).

A scalar subquery yielding several rows for an outer row is an error in SQL;
here the outer row is repeated once per subquery row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from sqlglot import exp

from dd_etl.plan import aggregates as agg
from dd_etl.plan.sql.grouping import is_aggregate_query
from dd_etl.plan.sql.joins import How, conjuncts, join
from dd_etl.plan.sql.relation import Output, Rel
from dd_etl.plan.sql.scope import (
    Scope,
    local_columns,
    references,
    rewrite,
    subqueries_of,
    translate,
    walk_local,
)

if TYPE_CHECKING:
    from dd_etl.plan.sql.relational import Compiler, Ctes


@dataclass
class Correlated:
    """A subquery compiled without its correlation: its first ``len(outer)``
    output columns are the inner sides of the equalities ``inner = outer``."""

    output: Output
    outer: list[exp.Expr]
    null_safe: list[bool]
    aggregate: bool  # an aggregate without GROUP BY: one row per key, even for no input
    values: list[str]  # the subquery's own output columns

    @property
    def keys(self) -> list[str]:
        return self.output.coll.columns[: len(self.outer)]


def _local_aliases(select: exp.Select) -> set[str]:
    items = [select.args["from_"].this] if select.args.get("from_") else []
    items += [j.this for j in select.args.get("joins") or []]
    return {i.alias_or_name for i in items}


class Subqueries:
    def __init__(self, compiler: Compiler) -> None:
        self.c = compiler
        self.loc = compiler.loc

    # ------------------------------------------------------------ decorrelation

    def correlated(self, query: exp.Expr, outer: Scope, ctes: Ctes) -> Correlated:
        if isinstance(query, exp.Subquery):
            query = query.this
        if not isinstance(query, exp.Select):
            out = self.c.query(query, ctes)
            return Correlated(out, [], [], False, out.coll.columns)
        local = _local_aliases(query)
        outer_aliases = outer.aliases - local
        pairs: list[tuple[exp.Expr, exp.Expr, bool]] = []
        rest: list[exp.Expr] = []
        where = query.args.get("where")
        for cond in conjuncts(where.this if where else None):
            if not references(cond) & outer_aliases:
                rest.append(cond)
                continue
            if isinstance(cond, exp.EQ | exp.NullSafeEQ):
                a, b = cond.left, cond.right
                ra, rb = references(a), references(b)
                if ra and rb and ra <= local and rb <= outer_aliases:
                    pairs.append((a, b, isinstance(cond, exp.NullSafeEQ)))
                    continue
                if ra and rb and rb <= local and ra <= outer_aliases:
                    pairs.append((b, a, isinstance(cond, exp.NullSafeEQ)))
                    continue
            raise self.loc.unsupported(
                "this correlated condition",
                cond,
                "a subquery may refer to the outer query only by equalities "
                "inner = outer in its WHERE clause",
            )
        stripped = query.copy()
        stripped.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
        for key, value in stripped.args.items():
            if key in ("where", "with_"):
                continue
            for node in value if isinstance(value, list) else [value]:
                if not isinstance(node, exp.Expr):
                    continue
                for column in local_columns(node):
                    if column.table in outer_aliases:
                        raise self.loc.unsupported(
                            "a correlated reference outside the subquery's WHERE clause", column
                        )
        items = list(query.expressions) + (
            [query.args["having"]] if query.args.get("having") else []
        )
        aggregate = not query.args.get("group") and is_aggregate_query(query, items)
        if pairs:
            if query.args.get("limit") or query.args.get("offset"):
                raise self.loc.unsupported("LIMIT in a correlated subquery", query)
            if query.args.get("group"):
                raise self.loc.unsupported("GROUP BY in a correlated subquery", query)
            keys = [exp.alias_(inner, f"__k{i}") for i, (inner, _, _) in enumerate(pairs)]
            stripped.set("expressions", [*keys, *stripped.expressions])
            if aggregate:
                stripped.set(
                    "group", exp.Group(expressions=[inner.copy() for inner, _, _ in pairs])
                )
        out = self.c.query(stripped, ctes)
        return Correlated(
            out,
            [o for _, o, _ in pairs],
            [ns for _, _, ns in pairs],
            aggregate,
            out.coll.columns[len(pairs) :],
        )

    # ---------------------------------------------------------- WHERE conjuncts

    def filter(self, rel: Rel, cond: exp.Expr, ctes: Ctes) -> Rel | None:
        """``EXISTS``/``IN`` as a semijoin, ``NOT EXISTS`` as an antijoin; None when
        the conjunct is not one of those."""
        negated = isinstance(cond, exp.Not)
        test = cond.this if negated else cond
        if isinstance(test, exp.Exists):
            sub = self.correlated(test.this, rel.scope, ctes)
            inner, outer = sub.keys, list(sub.outer)
        elif isinstance(test, exp.In) and test.args.get("query") and not negated:
            sub = self.correlated(test.args["query"], rel.scope, ctes)
            if len(sub.values) != 1:
                raise self.loc.error("a subquery after IN must return one column", test)
            inner, outer = [*sub.keys, sub.values[0]], [*sub.outer, test.this]
        else:
            return None
        if sub.aggregate and isinstance(test, exp.Exists):  # one row, even for no input
            return rel if not negated else rel.filter("FALSE")
        if any(sub.null_safe):
            return None
        computed: dict[str, str] = {}
        left_on: list[str] = []
        for expr in outer:
            name = self.c.names.hidden("key")
            computed[name] = translate(expr, rel.scope, self.loc)
            left_on.append(name)
        right = sub.output.coll
        if not inner:
            name, other = self.c.names.hidden("cross"), self.c.names.hidden("cross")
            computed[name] = "1"
            right = right.select(**{other: F.lit(1)})
            inner, left_on = [other], [name]
        extended = rel.extend(**computed)
        method = extended.coll.antijoin if negated else extended.coll.semijoin
        kept = method(right, left_on=left_on, right_on=inner)
        return Rel(kept.select(*rel.coll.columns), rel.scope)

    # ------------------------------------------------------ anywhere: left joins

    def lift(self, rel: Rel, expr: exp.Expr, ctes: Ctes) -> tuple[Rel, exp.Expr]:
        """``expr`` with every subquery replaced by columns joined onto ``rel``."""
        found: list[tuple[exp.Expr, exp.Expr]] = []
        scalars = [
            q
            for q in subqueries_of(expr)
            if isinstance(q, exp.Subquery) and not isinstance(q.parent, exp.In | exp.Exists)
        ]
        for node in [*walk_local(expr), *scalars]:
            if isinstance(node, exp.Any | exp.All):
                raise self.loc.unsupported("ANY/ALL with a subquery", node.parent or node)
            if isinstance(node, exp.Exists):
                rel, value = self._exists(rel, node, ctes)
            elif isinstance(node, exp.In) and node.args.get("query"):
                rel, value = self._in(rel, node, ctes)
            elif isinstance(node, exp.Subquery) and not isinstance(node.parent, exp.In):
                rel, value = self._scalar(rel, node, ctes)
            else:
                continue
            found.append((node, value))
        if not found:
            return rel, expr

        def replace(n: exp.Expr) -> exp.Expr | None:
            for node, value in found:
                if n is node or n == node:
                    return value.copy()
            return None

        return rel, rewrite(expr, replace)

    def _attach(
        self,
        rel: Rel,
        sub: Correlated,
        how: How,
        match: list[tuple[exp.Expr, str]] | None = None,
    ) -> tuple[Rel, str]:
        """Join the subquery's output to ``rel`` on its keys (and ``match``: outer
        expression = subquery column); its columns are then in scope under a
        fresh alias."""
        alias = self.c.names.hidden("sub")
        # fresh names: two subqueries over the same query may be attached to one relation
        fresh = {c: self.c.names.hidden("s_" + c.lstrip("_")) for c in sub.output.coll.columns}
        right = sub.output.coll.select(**{new: F.col(old) for old, new in fresh.items()})
        scope = Scope({(alias, old): new for old, new in fresh.items()})
        on: list[exp.Expr] = []
        for outer, key, ns in zip(sub.outer, sub.keys, sub.null_safe, strict=True):
            column = exp.column(key, table=alias)
            on.append(
                exp.NullSafeEQ(this=outer.copy(), expression=column)
                if ns
                else exp.EQ(this=outer.copy(), expression=column)
            )
        for outer, key in match or []:
            on.append(exp.EQ(this=outer.copy(), expression=exp.column(key, table=alias)))
        joined = join(rel, Rel(right, scope), how, on, self.c.names, self.loc)
        return joined, alias

    def _exists(self, rel: Rel, node: exp.Exists, ctes: Ctes) -> tuple[Rel, exp.Expr]:
        sub = self.correlated(node.this, rel.scope, ctes)
        if sub.aggregate:  # an aggregate without GROUP BY has a row even for no input
            return rel, exp.true()
        marker = self.c.names.hidden("exists")
        keys = sub.output.coll.select(*sub.keys, **{marker: F.lit(1)}).distinct()
        present = Correlated(
            Output(keys, [*sub.keys, marker]), sub.outer, sub.null_safe, False, [marker]
        )
        rel, alias = self._attach(rel, present, "left")
        return rel, exp.column(marker, table=alias).is_(exp.null()).not_()

    def _in(self, rel: Rel, node: exp.In, ctes: Ctes) -> tuple[Rel, exp.Expr]:
        sub = self.correlated(node.args["query"], rel.scope, ctes)
        if len(sub.values) != 1:
            raise self.loc.error("a subquery after IN must return one column", node)
        value = sub.values[0]
        # a marker per (keys, value) present ...
        hit = self.c.names.hidden("in")
        matches = (
            sub.output.coll.filter(F.col(value).isNotNull())
            .select(*sub.keys, value, **{hit: F.lit(1)})
            .distinct()
        )
        found = Correlated(Output(matches, matches.columns), sub.outer, sub.null_safe, False, [hit])
        rel, m_alias = self._attach(rel, found, "left", [(node.this, value)])
        # ... and per keys: how many rows, and how many NULL values
        rows, nulls = self.c.names.hidden("rows"), self.c.names.hidden("nulls")
        counts = sub.output.coll.aggregate(
            sub.keys,
            **{rows: agg.count(), nulls: agg.count(f"CASE WHEN `{value}` IS NULL THEN 1 END")},
        )
        counted = Correlated(
            Output(counts, counts.columns), sub.outer, sub.null_safe, True, [rows, nulls]
        )
        rel, c_alias = self._attach(rel, counted, "inner" if not sub.outer else "left")
        n_rows = exp.func("COALESCE", exp.column(rows, table=c_alias), exp.Literal.number(0))
        text = (
            "CASE WHEN __m IS NOT NULL THEN TRUE WHEN __r = 0 THEN FALSE "
            "WHEN __x IS NULL OR __n > 0 THEN NULL ELSE FALSE END"
        )
        template: exp.Expr = exp.maybe_parse(text, dialect="spark")
        parts = {
            "__m": exp.column(hit, table=m_alias),
            "__r": n_rows,
            "__x": exp.paren(node.this.copy()),
            "__n": exp.column(nulls, table=c_alias),
        }
        return rel, rewrite(
            template,
            lambda n: (
                parts[n.name].copy() if isinstance(n, exp.Column) and n.name in parts else None
            ),
        )

    def _scalar(self, rel: Rel, node: exp.Subquery, ctes: Ctes) -> tuple[Rel, exp.Expr]:
        sub = self.correlated(node, rel.scope, ctes)
        if len(sub.values) != 1:
            raise self.loc.error("a scalar subquery must return one column", node)
        value = sub.values[0]
        if not sub.outer:  # uncorrelated: an aggregate always has its one row
            rel, alias = self._attach(rel, sub, "inner" if sub.aggregate else "left")
            return rel, exp.column(value, table=alias)
        marker = self.c.names.hidden("found")
        marked = sub.output.coll.select(*sub.output.coll.columns, **{marker: F.lit(1)})
        sub = Correlated(
            Output(marked, marked.columns), sub.outer, sub.null_safe, sub.aggregate, [value]
        )
        rel, alias = self._attach(rel, sub, "left")
        result = exp.column(value, table=alias)
        if not sub.aggregate:
            return rel, result
        inner = node.this if isinstance(node, exp.Subquery) else node
        empty = _on_empty_input(inner.expressions[0].unalias())
        return rel, exp.Case(
            ifs=[exp.If(this=exp.column(marker, table=alias).is_(exp.null()), true=empty)],
            default=result,
        )


def _on_empty_input(projection: exp.Expr) -> exp.Expr:
    """An aggregate projection's value over no rows: COUNT is 0, the others NULL."""

    def replace(n: exp.Expr) -> exp.Expr | None:
        if isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
            n = n.this
        if isinstance(n, exp.Count):
            return exp.Literal.number(0)
        if isinstance(n, exp.AggFunc):
            return exp.null()
        return None

    return rewrite(projection, replace)
