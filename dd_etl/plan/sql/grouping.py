"""GROUP BY / aggregates: from the SQL aggregate calls of a query to one
``Collection.aggregate`` (COUNT/SUM/AVG accumulated in place, MIN/MAX as
hierarchical reductions, DISTINCT aggregates over a DISTINCT projection).

After grouping, the group key expressions and the aggregate calls are columns;
the query's projections, HAVING and ORDER BY are translated against them, and
any other column reference is an error, as in SQL.
"""

from __future__ import annotations

from sqlglot import exp

from dd_etl.plan import aggregates as agg
from dd_etl.plan.sql.errors import Located
from dd_etl.plan.sql.relation import Rel
from dd_etl.plan.sql.scope import Names, Scope, translate, walk_local

FUNCTIONS: dict[type[exp.Expr], agg.Function] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}


def is_aggregate_query(select: exp.Select, items: list[exp.Expr]) -> bool:
    if select.args.get("group"):
        return True
    return bool(aggregate_calls(items))


def aggregate_calls(items: list[exp.Expr]) -> list[exp.Expr]:
    """The aggregate calls in ``items`` (with their FILTER clause), each once."""
    calls: list[exp.Expr] = []
    for item in items:
        for n in walk_local(item):
            if isinstance(n.parent, exp.Window):  # a window function, refused later
                continue
            if isinstance(n, exp.AggFunc) and not isinstance(n.parent, exp.Filter):
                call: exp.Expr = n
            elif isinstance(n, exp.Filter) and isinstance(n.this, exp.AggFunc):
                call = n
            else:
                continue
            if call not in calls:
                calls.append(call)
    return calls


def _aggregate(call: exp.Expr, scope: Scope, loc: Located) -> agg.Aggregate:
    condition = None
    func = call
    if isinstance(call, exp.Filter):
        func = call.this
        condition = translate(call.expression.this, scope, loc)
    function = FUNCTIONS.get(type(func))
    if function is None:
        raise loc.unsupported(
            f"aggregate {func.key.upper()}", call, "COUNT, SUM, AVG, MIN and MAX are"
        )
    arg = func.this
    distinct = isinstance(arg, exp.Distinct)
    if distinct:
        args = arg.expressions
        if len(args) != 1:
            raise loc.unsupported("an aggregate of DISTINCT over several expressions", call)
        arg = args[0]
    for n in walk_local(arg):
        if isinstance(n, exp.AggFunc):
            raise loc.error("aggregate calls cannot be nested", call)
    if isinstance(arg, exp.Star) or arg is None:
        if function != "count":
            raise loc.error(f"{function.upper()}(*) is not SQL", call)
        expr = None if condition is None else f"CASE WHEN {condition} THEN 1 END"
        return agg.count(expr)
    value = translate(arg, scope, loc)
    if condition is not None:
        value = f"CASE WHEN {condition} THEN {value} END"
    if function in ("min", "max"):  # DISTINCT changes nothing
        return agg.Aggregate(function, value)
    return agg.Aggregate(function, value, distinct)


def group(rel: Rel, select: exp.Select, items: list[exp.Expr], names: Names, loc: Located) -> Rel:
    """The relation grouped by the query's GROUP BY (one group if there is none),
    with one column per group key and per aggregate call in ``items``."""
    clause = select.args.get("group")
    keys: list[exp.Expr] = list(clause.expressions) if clause else []
    for other in ("rollup", "cube", "grouping_sets"):
        if clause and clause.args.get(other):
            raise loc.unsupported(other.upper().replace("_", " "), clause)
    by: list[str] = []
    computed: dict[str, str] = {}
    after = Scope(grouped=True)
    for key in keys:
        if isinstance(key, exp.Column) and (key.table, key.name) in rel.scope.columns:
            column = rel.scope.columns[(key.table, key.name)]
            after.columns[(key.table, key.name)] = column
        else:
            column = names.hidden("group")
            computed[column] = translate(key, rel.scope, loc)
            after.replacements.append((key, column))
        if column not in by:
            by.append(column)
    aggregates: dict[str, agg.Aggregate] = {}
    for call in aggregate_calls(items):
        name = names.hidden("agg")
        aggregates[name] = _aggregate(call, rel.scope, loc)
        after.replacements.append((call, name))
    pre = rel.extend(**computed).coll
    # GROUP BY without aggregates: the distinct groups
    grouped = pre.aggregate(by, **aggregates) if aggregates else pre.select(*by).distinct()
    return Rel(grouped, after)
