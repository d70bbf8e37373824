"""Queries to collections: FROM and joins, WHERE, GROUP BY/HAVING, projections,
DISTINCT, ORDER BY … LIMIT/OFFSET, set operations and CTEs.

Every query compiles to an ``Output`` whose columns carry fresh internal names;
only the view itself takes the SQL names at the end. WHERE conjuncts over the
tables of an inner join become its keys or filters of its inputs, so
``FROM a, b WHERE a.x = b.y`` is an equi-join, not a filtered cross join; the
items of a FROM clause of inner joins are joined in an order in which each
meets those before it on an equality, where one exists.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import functions as F
from pyspark.sql.types import (
    DataType,
    LongType,
    NullType,
    StructField,
    StructType,
)
from sqlglot import exp

from dd_etl.plan.column_names import column
from dd_etl.plan.dataflow import Collection, Dataflow, PlanError
from dd_etl.plan.sql.coercion import common_type
from dd_etl.plan.sql.errors import Located, SqlError, rejection, spark_reason
from dd_etl.plan.sql.frontend import Table
from dd_etl.plan.sql.generators import lateral_views, select_generator
from dd_etl.plan.sql.grouping import group, is_aggregate_query
from dd_etl.plan.sql.joins import How, conjuncts, join, join_order
from dd_etl.plan.sql.recursion import reads, recursive_cte
from dd_etl.plan.sql.relation import Ctes, Output, Rel
from dd_etl.plan.sql.scope import Names, Scope, references, subqueries_of, translate
from dd_etl.plan.sql.subqueries import Subqueries
from dd_etl.plan.sql.windows import bound_pushed, evaluate, spell_out_named, window_calls


def _how(j: exp.Join) -> How | None:
    side = (j.side or "").upper()
    kind = (j.kind or "").upper()
    if kind in ("SEMI", "ANTI"):
        return None
    if side in ("LEFT", "RIGHT", "FULL"):
        return side.lower()  # type: ignore[return-value]
    return "inner"


class Compiler:
    def __init__(
        self,
        flow: Dataflow,
        tables: Mapping[str, Table],
        loc: Located,
        read: Mapping[str, set[str]],
    ) -> None:
        """``read``: per table alias, the columns the statement reads of it
        (``scope.columns_read``); a table is read for those only."""
        self.flow = flow
        self.tables = tables
        self.loc = loc
        self.read = read
        self.names = Names()
        self.subqueries = Subqueries(self)

    # ---------------------------------------------------------------- queries

    def query(self, node: exp.Expr, ctes: Ctes) -> Output:
        if isinstance(node, exp.Subquery):
            out = self.query(node.this, ctes)
            return self.order_limit_output(node, out)
        ctes = self.with_ctes(node, ctes)
        if isinstance(node, exp.Select):
            return self.select(node, ctes)
        if isinstance(node, exp.Union | exp.Except | exp.Intersect):
            return self.set_operation(node, ctes)
        raise self.loc.unsupported(f"{node.key.upper()} as a query", node)

    def with_ctes(self, node: exp.Expr, ctes: Ctes) -> Ctes:
        with_ = node.args.get("with_")
        if not with_:
            return ctes
        scope = dict(ctes)
        for cte in with_.expressions:
            name = cte.alias_or_name
            if with_.args.get("recursive") and reads(cte.this, name):
                scope[name] = recursive_cte(self, cte, scope)
            else:
                scope[name] = self.query(cte.this, scope)
        return scope

    # ------------------------------------------------------------------- FROM

    def source(self, item: exp.Expr, ctes: Ctes) -> Rel:
        alias = item.alias_or_name
        if isinstance(item, exp.Table):
            if item.name in ctes:
                return ctes[item.name].as_rel(alias, self.names)
            table = self.tables[item.name]
            cols = list(table.columns)
            out = Output(table.collection, [table.columns[c] for c in cols])
            # Only the columns the query reads: arrangements (and every lookup
            # into them) hold what the query needs, not the table's every column.
            return out.as_rel(alias, self.names, self.read.get(alias.lower(), set()))
        if isinstance(item, exp.Subquery):
            return self.query(item, ctes).as_rel(alias, self.names)
        if isinstance(item, exp.Values):
            return self.values(item).as_rel(alias, self.names)
        raise self.loc.unsupported(f"{item.key.upper()} in FROM", item)

    def values(self, item: exp.Values) -> Output:
        """``VALUES`` rows as a constant collection, typed by Spark's analysis."""
        names = item.alias_column_names or [f"col{i + 1}" for i in range(len(item.expressions[0]))]
        rows = ", ".join(row.sql(dialect="spark") for row in item.expressions)
        cols = ", ".join(f"`{n}`" for n in names)
        try:
            df = self.flow.spark.sql(f"SELECT * FROM VALUES {rows} AS v({cols})")
            data = [tuple(r) for r in df.collect()]
        except Exception as e:
            raise self.loc.error(f"cannot evaluate VALUES: {e}".splitlines()[0], item) from e
        inner = [self.names.hidden("value") for _ in names]
        schema = StructType(
            [
                StructField(i, _typed(f.dataType))
                for i, f in zip(inner, df.schema.fields, strict=True)
            ]
        )
        return Output(self.flow.constant(data, schema), list(names))

    def from_(
        self, select: exp.Select, ctes: Ctes, where: list[exp.Expr]
    ) -> tuple[Rel, list[exp.Expr]]:
        """The FROM clause joined; WHERE conjuncts that could be placed inside
        inner joins are used up there, the others returned."""
        from_ = select.args.get("from_")
        if from_ is None:
            one = self.flow.constant([[1]], StructType([StructField("__one", LongType())]))
            return Rel(one, Scope()), where
        joins = select.args.get("joins") or []
        ons = [conjuncts(j.args.get("on")) for j in joins]
        for j, on in zip(joins, ons, strict=True):
            if j.args.get("using"):
                raise self.loc.unsupported("USING here", j)
            for cond in on:
                if subqueries_of(cond):
                    raise self.loc.unsupported("a subquery in a join condition", cond)
        items = [from_.this, *[j.this for j in joins]]
        hows = [_how(j) for j in joins]
        if joins and all(how == "inner" for how in hows):
            # Inner joins go in any order and ON is WHERE for them: join each item,
            # where it can, on an equality with those before it.
            where = [*(c for on in ons for c in on), *where]
            keys = [c for c in where if not subqueries_of(c)]
            items = [items[i] for i in join_order([i.alias_or_name for i in items], keys)]
            ons = [[] for _ in joins]
        rel = self.source(items[0], ctes)
        aliases = [i.alias_or_name for i in items]
        seen = [set(aliases[: i + 1]) for i in range(len(items))]
        # where a WHERE conjunct can go: the first join (0 = the FROM item itself)
        # after which all its tables are present, if no later join pads that side
        placed: dict[int, list[exp.Expr]] = {}
        rest: list[exp.Expr] = []
        for cond in where:
            refs = references(cond)
            home = next((i for i, s in enumerate(seen) if refs and refs <= s), None)
            if (
                subqueries_of(cond)
                or home is None
                or (home > 0 and hows[home - 1] != "inner")
                or any(h in ("right", "full", None) for h in hows[home:])
            ):
                rest.append(cond)
            else:
                placed.setdefault(home, []).append(cond)
        for cond in placed.get(0, []):
            rel = rel.filter(translate(cond, rel.scope, self.loc))
        for i, (j, item, how) in enumerate(zip(joins, items[1:], hows, strict=True), start=1):
            right = self.source(item, ctes)
            on = ons[i - 1] + placed.get(i, [])
            if how is None:
                rel = self.semi_anti(rel, right, j, on)
            else:
                rel = join(rel, right, how, on, self.names, self.loc)
        return rel, rest

    def semi_anti(self, rel: Rel, right: Rel, j: exp.Join, on: list[exp.Expr]) -> Rel:
        """``LEFT SEMI JOIN`` / ``LEFT ANTI JOIN`` on equality keys."""
        la, ra = rel.scope.aliases, right.scope.aliases
        lk: dict[str, str] = {}
        rk: dict[str, str] = {}
        for cond in on:
            if isinstance(cond, exp.EQ):
                a, b = cond.left, cond.right
                if references(b) <= la and references(a) <= ra:
                    a, b = b, a
                if references(a) and references(b) and references(a) <= la and references(b) <= ra:
                    lk[self.names.hidden("key")] = translate(a, rel.scope, self.loc)
                    rk[self.names.hidden("key")] = translate(b, right.scope, self.loc)
                    continue
            if references(cond) <= ra:
                right = right.filter(translate(cond, right.scope, self.loc))
                continue
            raise self.loc.unsupported(f"this condition of a {j.kind} JOIN", cond)
        if not lk:
            lk[self.names.hidden("cross")] = "1"
            rk[self.names.hidden("cross")] = "1"
        left, other = rel.extend(**lk), right.extend(**rk)
        method = left.coll.semijoin if (j.kind or "").upper() == "SEMI" else left.coll.antijoin
        kept = method(other.coll, left_on=list(lk), right_on=list(rk))
        return Rel(kept.select(*rel.coll.columns), rel.scope)

    # ----------------------------------------------------------------- SELECT

    def select(self, node: exp.Select, ctes: Ctes) -> Output:
        distinct = node.args.get("distinct")  # DISTINCT ON, PIVOT: refused (refusals.py)
        node = bound_pushed(spell_out_named(node, self.loc))
        where = node.args.get("where")
        rel, rest = self.from_(node, ctes, conjuncts(where.this if where else None))
        rel = lateral_views(rel, node.args.get("laterals") or [], self.names, self.loc)
        for cond in rest:
            rel = self.where(rel, cond, ctes)

        having = node.args.get("having")
        order = node.args.get("order")
        outputs = [e.alias_or_name for e in node.expressions]
        order_items = list(order.expressions) if order else []
        items = [*node.expressions, *([having.this] if having else []), *order_items]
        if is_aggregate_query(node, items):
            rel = group(rel, node, items, self.names, self.loc)
        if having:
            rel = self.where(rel, having.this, ctes)
        qualify = node.args.get("qualify")
        calls = window_calls([*items, *([qualify.this] if qualify else [])])
        if calls:
            bounds = conjuncts(qualify.this) if qualify else []
            rel = evaluate(rel, calls, bounds, self.names, self.loc)
        if qualify:
            rel = self.where(rel, qualify.this, ctes)
        rel = select_generator(rel, node.expressions, self.names, self.loc)

        named: dict[str, str] = {}
        columns: list[str] = []
        for projection in node.expressions:
            rel, expr = self.subqueries.lift(rel, projection.unalias(), ctes)
            column = self.names.fresh(projection.alias_or_name)
            named[column] = translate(expr, rel.scope, self.loc)
            columns.append(column)
        by_name = dict(zip(outputs, columns, strict=True))
        limit, offset, ties = self.limit_offset(node)
        if limit is None and offset == 0:
            coll = self.project(rel, named, node.expressions)
            if distinct is not None:
                coll = coll.distinct()
            return Output(coll, outputs)
        ordering: list[tuple[str, bool]] = []
        for i, item in enumerate(order_items):
            expr = item.this
            if isinstance(expr, exp.Column) and not expr.table and expr.name in by_name:
                text = f"`{by_name[expr.name]}`"
                column = by_name[expr.name]
            else:
                if distinct is not None:
                    raise self.loc.error("with DISTINCT, ORDER BY must use output columns", item)
                rel, lifted = self.subqueries.lift(rel, expr, ctes)
                column = self.names.hidden(f"order{i}")
                text = translate(lifted, rel.scope, self.loc)
                named[column] = text
            nulls = self.names.hidden(f"nulls{i}")
            named[nulls] = f"({named.get(column, text)}) IS NULL"
            ordering += [
                (nulls, bool(item.args.get("nulls_first"))),
                (column, bool(item.args.get("desc"))),
            ]
        coll = self.project(rel, named, node.expressions)
        if distinct is not None:
            coll = coll.distinct()
        coll = self.top(coll, ordering, limit, offset, ties)
        return Output(coll.select(*columns), outputs)

    def where(self, rel: Rel, cond: exp.Expr, ctes: Ctes) -> Rel:
        if subqueries_of(cond):
            joined = self.subqueries.filter(rel, cond, ctes)
            if joined is not None:
                return joined
            rel, cond = self.subqueries.lift(rel, cond, ctes, filtering=True)
        try:
            return rel.filter(translate(cond, rel.scope, self.loc))
        except SqlError:
            raise
        except PlanError as e:  # Spark rejects the translated expression
            raise self.loc.error(rejection(e), cond) from e

    def project(self, rel: Rel, named: dict[str, str], items: list[exp.Expr]) -> Collection:
        """The projection; if Spark rejects it, an error at the first projection it rejects."""
        try:
            return rel.coll.select(**named)
        except PlanError as e:
            for (column, text), item in zip(named.items(), items, strict=False):
                try:
                    rel.coll.select(**{column: text})
                except PlanError as one:
                    raise self.loc.error(rejection(one), item) from one
            raise self.loc.error(f"Spark cannot evaluate the projection: {spark_reason(e)}") from e

    # ------------------------------------------------------- ORDER BY / LIMIT

    def limit_offset(self, node: exp.Expr) -> tuple[int | None, int, bool]:
        """LIMIT (or FETCH FIRST … ROWS), OFFSET, and whether ties of the last
        row are kept too (FETCH … WITH TIES)."""

        def number(clause: exp.Expr | None) -> int | None:
            if clause is None:
                return None
            value = clause.args.get("count") or clause.args.get("expression") or clause.this
            if not isinstance(value, exp.Literal) or value.is_string or not value.this.isdigit():
                raise self.loc.unsupported("a LIMIT or OFFSET that is not a number", clause)
            return int(value.this)

        limit = node.args.get("limit")
        offset = number(node.args.get("offset")) or 0
        if not isinstance(limit, exp.Fetch):
            return number(limit), offset, False
        options = limit.args.get("limit_options")  # PERCENT: refused (refusals.py)
        ties = options is not None and bool(options.args.get("with_ties"))
        if ties and offset:
            raise self.loc.unsupported("OFFSET with FETCH … WITH TIES", limit)
        return number(limit), offset, ties

    def top(
        self,
        coll: Collection,
        ordering: list[tuple[str, bool]],
        limit: int | None,
        offset: int,
        ties: bool = False,
    ) -> Collection:
        """Rows ``offset`` to ``offset + limit`` by ``ordering`` (ties broken by the
        whole row): the first ``offset + limit`` minus the first ``offset``;
        with ``ties``, the rows ranked at most ``limit``."""
        if limit == 0:
            return coll.filter("FALSE")
        if ties and limit is not None:
            return coll.top_k([], ordering, limit, numbering="rank")
        kept = coll if limit is None else coll.top_k([], ordering, limit + offset)
        if offset:
            kept = kept.concat(coll.top_k([], ordering, offset).negate())
        return kept

    def order_limit_output(self, node: exp.Expr, out: Output) -> Output:
        """ORDER BY … LIMIT on a set operation (or a parenthesised query): by output columns."""
        limit, offset, ties = self.limit_offset(node)
        if limit is None and offset == 0:
            return out
        order = node.args.get("order")
        by_name = dict(zip(out.names, out.coll.columns, strict=True))
        named = {c: f"`{c}`" for c in out.coll.columns}
        ordering: list[tuple[str, bool]] = []
        for i, item in enumerate(order.expressions if order else []):
            expr = item.this
            if not (isinstance(expr, exp.Column) and expr.name in by_name):
                raise self.loc.unsupported("ORDER BY an expression here (use output columns)", item)
            nulls = self.names.hidden(f"nulls{i}")
            named[nulls] = f"`{by_name[expr.name]}` IS NULL"
            ordering += [
                (nulls, bool(item.args.get("nulls_first"))),
                (by_name[expr.name], bool(item.args.get("desc"))),
            ]
        coll = self.top(out.coll.select(**named), ordering, limit, offset, ties)
        return Output(coll.select(*out.coll.columns), out.names)

    # --------------------------------------------------------- set operations

    def set_operation(self, node: exp.Union | exp.Except | exp.Intersect, ctes: Ctes) -> Output:
        left = self.query(node.left, ctes)
        right = self.query(node.right, ctes)
        if len(left.names) != len(right.names):
            raise self.loc.error(
                f"{node.key.upper()} of {len(left.names)} and {len(right.names)} columns", node
            )
        left_coll, right_coll = self.aligned(left, right, node)
        distinct = bool(node.args.get("distinct"))
        if isinstance(node, exp.Union):
            coll = left_coll.concat(right_coll)
            coll = coll.distinct() if distinct else coll
        elif isinstance(node, exp.Except):
            if distinct:
                coll = left_coll.distinct().concat(right_coll.distinct().negate()).threshold("1")
            else:
                coll = left_coll.concat(right_coll.negate()).threshold("_diff")
        elif distinct:
            both = left_coll.distinct().concat(right_coll.distinct())
            coll = both.threshold("IF(_diff >= 2, 1, 0)")
        else:  # min(a, b) = a - max(a - b, 0)
            surplus = left_coll.concat(right_coll.negate()).threshold("_diff")
            coll = left_coll.concat(surplus.negate())
        return self.order_limit_output(node, Output(coll, left.names))

    def aligned(self, left: Output, right: Output, node: exp.Expr) -> tuple[Collection, Collection]:
        """Both sides with the left's column names and common types."""
        lf, rf = left.coll.node.schema.fields, right.coll.node.schema.fields
        types: list[DataType] = []
        for a, b in zip(lf, rf, strict=True):
            common = common_type(a.dataType, b.dataType)
            if common is None:
                raise self.loc.error(
                    f"{node.key.upper()} column '{left.names[len(types)]}' is "
                    f"{a.dataType.simpleString()} on the left and "
                    f"{b.dataType.simpleString()} on the right",
                    node,
                )
            types.append(common)

        def cast(out: Output) -> Collection:
            fields = out.coll.node.schema.fields
            named = {
                target.name: F.col(f.name).cast(t) if f.dataType != t else column(f.name)
                for f, target, t in zip(fields, lf, types, strict=True)
            }
            return out.coll.select(**named)

        return cast(left), cast(right)


def _typed(t: DataType) -> DataType:
    return LongType() if isinstance(t, NullType) else t
