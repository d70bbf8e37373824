"""Subqueries, correlated or not, decorrelated into joins.

A correlated subquery refers to the outer query in its WHERE clause. Equalities
``inner = outer`` become join keys: the subquery is compiled without them, with
its side of each equality as extra leading output columns (and, for an
aggregate without GROUP BY, grouped by them), and joined to the outer relation
on the keys. Other correlated conditions may come beside such equalities, in a
subquery that does not aggregate: the subquery's rows are then found for each
distinct combination of the outer values the correlation reads, by a join on
the equalities and the other conditions over each joined pair, and the outer
relation joins that on the combination. Uncorrelated subqueries join on a
constant.

- In a WHERE conjunct, ``EXISTS``/``IN`` are semijoins and ``NOT EXISTS`` an
  antijoin: rows keep their own multiplicity.
- Anywhere else (and ``NOT IN``), a subquery becomes columns of a left join
  that give its SQL value: ``EXISTS`` a marker; ``x IN (S)`` three-valued from a
  marker of a match and the count of rows and of NULLs in ``S`` (``NOT IN``
  over a set holding a NULL is never true); a scalar subquery its value, or,
  for an aggregate over no rows, the aggregate's value on empty input (COUNT 0).
  Where a WHERE condition cannot be true for a NULL value of a scalar subquery
  that is NULL for no rows (``x < (SELECT 0.2 * AVG(q) ...)``), an inner join.

A scalar subquery yielding several rows for an outer row is an error in SQL;
here the outer row is repeated once per subquery row.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import functions as F
from sqlglot import exp

from dd_etl.plan import aggregates as agg
from dd_etl.plan.sql.grouping import is_aggregate_query
from dd_etl.plan.sql.joins import How, conjuncts, join
from dd_etl.plan.sql.query_compiler import QueryCompiler
from dd_etl.plan.sql.relation import Ctes, Output, Rel
from dd_etl.plan.sql.scope import (
    Scope,
    local_columns,
    references,
    rewrite,
    subqueries_of,
    translate,
    walk_local,
)


@dataclass
class Correlated:
    """A subquery compiled without its correlation: an outer row's subquery rows
    are those whose first ``len(outer)`` output columns equal its values of the
    ``outer`` expressions (the inner sides of the equalities ``inner = outer``,
    or the outer values themselves)."""

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


def _equality(
    cond: exp.Expr, local: set[str], outer: set[str]
) -> tuple[exp.Expr, exp.Expr, bool] | None:
    """``(inner side, outer side, NULL-safe)`` of an equality ``inner = outer``."""
    if not isinstance(cond, exp.EQ | exp.NullSafeEQ):
        return None
    a, b = cond.left, cond.right
    ra, rb = references(a), references(b)
    null_safe = isinstance(cond, exp.NullSafeEQ)
    if ra and rb and ra <= local and rb <= outer:
        return a, b, null_safe
    if ra and rb and rb <= local and ra <= outer:
        return b, a, null_safe
    return None


def _columns_of(conditions: list[exp.Expr], aliases: set[str]) -> list[exp.Column]:
    """The columns of ``aliases`` the conditions read, each once."""
    found: dict[tuple[str, str], exp.Column] = {}
    for cond in conditions:
        for column in local_columns(cond):
            if column.table in aliases:
                found.setdefault((column.table, column.name), column)
    return list(found.values())


class Subqueries:
    def __init__(self, compiler: QueryCompiler) -> None:
        self.c = compiler
        self.loc = compiler.loc

    # ------------------------------------------------------------ decorrelation

    def correlated(self, query: exp.Expr, outer: Rel, ctes: Ctes) -> Correlated:
        """The subquery ``query`` of a query over ``outer``, decorrelated."""
        if isinstance(query, exp.Subquery):
            query = query.this
        if not isinstance(query, exp.Select):
            out = self.c.query(query, ctes)
            return Correlated(out, [], [], False, out.coll.columns)
        local = _local_aliases(query)
        outer_aliases = outer.scope.aliases - local
        pairs: list[tuple[exp.Expr, exp.Expr, bool]] = []
        others: list[exp.Expr] = []  # correlated conditions that are not such equalities
        correlation: list[exp.Expr] = []  # both kinds
        rest: list[exp.Expr] = []
        where = query.args.get("where")
        for cond in conjuncts(where.this if where else None):
            if not references(cond) & outer_aliases:
                rest.append(cond)
                continue
            correlation.append(cond)
            pair = _equality(cond, local, outer_aliases)
            if pair is not None:
                pairs.append(pair)
                continue
            if subqueries_of(cond):
                raise self.loc.unsupported("a subquery in a correlated condition", cond)
            others.append(cond)
        if others and not pairs:
            raise self.loc.unsupported(
                "this correlated condition",
                others[0],
                "a subquery may refer to the outer query by equalities inner = outer in "
                "its WHERE clause, and by other conditions only beside such an equality",
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
        if others:
            if aggregate:
                raise self.loc.unsupported(
                    "this correlated condition",
                    others[0],
                    "an aggregate subquery may refer to the outer query only by "
                    "equalities inner = outer",
                )
            return self._per_outer_values(stripped, outer, correlation, local, ctes)
        if pairs:
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

    def _per_outer_values(
        self,
        stripped: exp.Select,
        outer: Rel,
        correlation: list[exp.Expr],
        local: set[str],
        ctes: Ctes,
    ) -> Correlated:
        """A subquery correlated by equalities and other conditions (TPC-H Q21's
        ``l3.l_orderkey = l1.l_orderkey AND l3.l_suppkey <> l1.l_suppkey``) as its
        rows for each distinct combination of the outer values the correlation
        reads: those combinations joined to the subquery's rows on the
        equalities, the other conditions applied to each joined pair. An outer
        row finds its subquery rows by NULL-safe equality on all those values
        (its own combination); rows keep their multiplicity, as the
        combinations are distinct."""
        outer_aliases = outer.scope.aliases - local
        outer_columns = _columns_of(correlation, outer_aliases)
        inner_columns = _columns_of(correlation, local)
        exposed = [exp.alias_(c.copy(), f"__c{i}") for i, c in enumerate(inner_columns)]
        stripped.set("expressions", [*exposed, *stripped.expressions])
        out = self.c.query(stripped, ctes)
        n = len(inner_columns)
        exposed_as = zip(inner_columns, out.coll.columns[:n], strict=True)
        inner = Rel(out.coll, Scope({(c.table, c.name): k for c, k in exposed_as}))
        values = {
            self.c.names.hidden("outer"): translate(c, outer.scope, self.loc) for c in outer_columns
        }
        domain = Rel(
            outer.coll.select(**values).distinct(),
            Scope({(c.table, c.name): v for c, v in zip(outer_columns, values, strict=True)}),
        )
        joined = join(domain, inner, "inner", correlation, self.c.names, self.loc)
        kept = out.coll.columns[n:]
        rows = joined.coll.select(*values, *kept)
        if stripped.args.get("distinct"):
            rows = rows.distinct()
        return Correlated(
            Output(rows, [*values, *out.names[n:]]),
            [c.copy() for c in outer_columns],
            [True] * len(outer_columns),
            False,
            kept,
        )

    # ---------------------------------------------------------- WHERE conjuncts

    def filter(self, rel: Rel, cond: exp.Expr, ctes: Ctes) -> Rel | None:
        """``EXISTS``/``IN`` as a semijoin, ``NOT EXISTS`` as an antijoin; None when
        the conjunct is not one of those."""
        negated = isinstance(cond, exp.Not)
        test = cond.this if negated else cond
        if isinstance(test, exp.Exists):
            sub = self.correlated(test.this, rel, ctes)
            inner, outer, null_safe = sub.keys, list(sub.outer), list(sub.null_safe)
        elif isinstance(test, exp.In) and test.args.get("query") and not negated:
            sub = self.correlated(test.args["query"], rel, ctes)
            if len(sub.values) != 1:
                raise self.loc.error("a subquery after IN must return one column", test)
            inner, outer = [*sub.keys, sub.values[0]], [*sub.outer, test.this]
            null_safe = [*sub.null_safe, False]
        else:
            return None
        if sub.aggregate and isinstance(test, exp.Exists):  # one row, even for no input
            return rel if not negated else rel.filter("FALSE")
        computed: dict[str, str] = {}
        left_on: list[str] = []
        for expr in outer:
            name = self.c.names.hidden("key")
            computed[name] = translate(expr, rel.scope, self.loc)
            left_on.append(name)
        right = sub.output.coll
        present = [f"`{c}` IS NOT NULL" for c, ns in zip(inner, null_safe, strict=True) if not ns]
        if any(null_safe) and present:
            # One join mode for all keys, NULL-safe: without NULLs in the strict
            # keys of the right side, nothing matches a NULL there on the left.
            right = right.filter(" AND ".join(present))
        if not inner:
            name, other = self.c.names.hidden("cross"), self.c.names.hidden("cross")
            computed[name] = "1"
            right = right.select(**{other: F.lit(1)})
            inner, left_on = [other], [name]
        extended = rel.extend(**computed)
        method = extended.coll.antijoin if negated else extended.coll.semijoin
        kept = method(right, left_on=left_on, right_on=inner, null_safe=any(null_safe))
        return Rel(kept.select(*rel.coll.columns), rel.scope)

    # ------------------------------------------------------ anywhere: left joins

    def lift(
        self, rel: Rel, expr: exp.Expr, ctes: Ctes, filtering: bool = False
    ) -> tuple[Rel, exp.Expr]:
        """``expr`` with every subquery replaced by columns joined onto ``rel``;
        ``filtering``: ``expr`` is a condition that keeps only rows where it is true."""
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
                rejects = filtering and _rejects_null(expr, node)
                rel, value = self._scalar(rel, node, ctes, rejects)
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
        sub = self.correlated(node.this, rel, ctes)
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
        sub = self.correlated(node.args["query"], rel, ctes)
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

    def _scalar(
        self, rel: Rel, node: exp.Subquery, ctes: Ctes, rejects_null: bool
    ) -> tuple[Rel, exp.Expr]:
        """The subquery's value; with ``rejects_null``, the rows it is NULL for
        are dropped anyway, so where no row of the subquery means NULL, rows
        without one need not be kept: an inner join, not a left join."""
        sub = self.correlated(node, rel, ctes)
        if len(sub.values) != 1:
            raise self.loc.error("a scalar subquery must return one column", node)
        value = sub.values[0]
        inner = node.this if isinstance(node, exp.Subquery) else node
        empty = _on_empty_input(inner.expressions[0].unalias()) if sub.aggregate else exp.null()
        if not sub.outer or (rejects_null and _is_null(empty)):
            # (an uncorrelated aggregate always has its one row)
            how: How = "inner" if sub.aggregate or rejects_null else "left"
            rel, alias = self._attach(rel, sub, how)
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
        return rel, exp.Case(
            ifs=[exp.If(this=exp.column(marker, table=alias).is_(exp.null()), true=empty)],
            default=result,
        )


STRICT = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Neg,
    exp.Paren,
    exp.Cast,
)
"""Operators whose value is NULL when an operand is NULL."""


def _rejects_null(condition: exp.Expr, node: exp.Expr) -> bool:
    """Whether ``condition`` cannot be true where ``node``, inside it, is NULL:
    each operator from ``node`` up is strict, until an AND or BETWEEN (NULL or
    false for a NULL operand), above which only more of those may follow."""
    strict = True
    child = node
    while child is not condition:
        parent = child.parent
        if parent is None:
            return False
        if isinstance(parent, exp.And | exp.Between):
            strict = False
        elif not (strict and isinstance(parent, STRICT)) and not isinstance(parent, exp.Paren):
            return False
        child = parent
    return True


def _is_null(expr: exp.Expr) -> bool:
    """Whether ``expr`` is NULL whatever its columns: NULL, or a strict operator
    over something that is."""
    if isinstance(expr, exp.Null):
        return True
    return isinstance(expr, STRICT) and any(_is_null(c) for c in expr.iter_expressions())


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
