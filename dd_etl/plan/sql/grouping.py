"""GROUP BY / aggregates: from the SQL aggregate calls of a query to one
``Collection.aggregate`` (COUNT/SUM/AVG accumulated in place, MIN/MAX as
hierarchical reductions, DISTINCT aggregates over a DISTINCT projection).

GROUPING SETS, ROLLUP and CUBE are the union of one aggregation per grouping
set, the keys outside the set NULL and ``GROUPING()``/``GROUPING_ID()`` a
constant of each set: every part is maintained as a plain GROUP BY is.

After grouping, the group key expressions and the aggregate calls are columns;
the query's projections, HAVING and ORDER BY are translated against them, and
any other column reference is an error, as in SQL.
"""

from __future__ import annotations

from itertools import combinations, product

from pyspark.sql.types import LongType
from sqlglot import exp

from dd_etl.plan import aggregates as agg
from dd_etl.plan.column_names import cast_literal
from dd_etl.plan.column_names import column as named_column
from dd_etl.plan.dataflow import Collection
from dd_etl.plan.sql.errors import Located
from dd_etl.plan.sql.relation import Rel
from dd_etl.plan.sql.scope import (
    CALL_WRAPPERS,
    Names,
    Scope,
    translate,
    translate_aggregate,
    walk_local,
)

FUNCTIONS: dict[type[exp.Expr], agg.Function] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}
GROUPING_CALLS = (exp.Grouping, exp.GroupingId)
"""Whether a key is aggregated away in a grouping set: a constant of each set."""


def is_aggregate_query(select: exp.Select, items: list[exp.Expr]) -> bool:
    if select.args.get("group"):
        return True
    return bool(aggregate_calls(items))


def aggregate_calls(items: list[exp.Expr]) -> list[exp.Expr]:
    """The aggregate calls in ``items`` (with the clauses of each call: FILTER,
    WITHIN GROUP, IGNORE NULLS), each once; a window's function is not one."""
    calls: list[exp.Expr] = []
    for item in items:
        for n in walk_local(item):
            if not isinstance(n, exp.AggFunc) or isinstance(n, GROUPING_CALLS):
                continue  # GROUPING() is a constant of each grouping set (``group``)
            call: exp.Expr = n
            while isinstance(call.parent, CALL_WRAPPERS) and call.parent.this is call:
                call = call.parent
            if not isinstance(call.parent, exp.Window) and call not in calls:
                calls.append(call)
    return calls


ANY = (exp.AnyValue, exp.First)
"""Any value of the group: its least, so that each evaluation picks the same."""
LISTS = (exp.ArrayAgg, exp.ArrayUniqueAgg, exp.List)
"""Lists of the group's values: sorted, as SQL gives them no order."""
PERCENTILES: dict[type[exp.Expr], str] = {
    exp.PercentileCont: "percentile_cont",
    exp.PercentileDisc: "percentile_disc",
}


def _aggregate(call: exp.Expr, scope: Scope, loc: Located) -> agg.Aggregate:
    """COUNT/SUM/AVG/MIN/MAX (and ANY_VALUE, FIRST as MIN, APPROX_COUNT_DISTINCT as
    an exact COUNT DISTINCT) as robust reductions; any other aggregate as a call
    Spark evaluates over each touched group's rows."""
    condition = None
    func = call
    if isinstance(func, exp.Filter):
        condition = translate(func.expression.this, scope, loc)
        func = func.this
    if isinstance(func, exp.IgnoreNulls | exp.RespectNulls) and isinstance(func.this, ANY):
        func = func.this
    function = FUNCTIONS.get(type(func))
    if isinstance(func, ANY):
        function = "min"
    elif isinstance(func, exp.ApproxDistinct):
        function = "count"
    arg = func.this
    distinct = isinstance(arg, exp.Distinct) or isinstance(func, exp.ApproxDistinct)
    if isinstance(arg, exp.Distinct):
        if len(arg.expressions) != 1:
            function = None  # COUNT(DISTINCT a, b): Spark counts the distinct pairs
        arg = arg.expressions[0]
    if function is None:
        empty: object = (
            0 if isinstance(func, exp.Count) else [] if isinstance(func, LISTS) else None
        )
        return agg.call(_spark_call(func, condition, scope, loc), empty)
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


def _spark_call(func: exp.Expr, condition: str | None, scope: Scope, loc: Located) -> str:
    """The aggregate call as Spark SQL; a percentile exact (``WITHIN GROUP``,
    which sqlglot would make approximate), a list sorted."""
    inner = func.this if isinstance(func, exp.WithinGroup) else func
    name = PERCENTILES.get(type(inner))
    if name is not None:
        if isinstance(func, exp.WithinGroup):  # percentile_cont(p) WITHIN GROUP (ORDER BY x)
            fraction, ordered = inner.this, func.expression.expressions[0]
        else:  # DuckDB's percentile_cont(x, p)
            fraction, ordered = inner.expression, exp.Ordered(this=inner.this)
        order = translate(ordered.this, scope, loc) + (" DESC" if ordered.args.get("desc") else "")
        text = f"{name}({translate(fraction, scope, loc)}) WITHIN GROUP (ORDER BY {order})"
    else:
        text = translate_aggregate(func, scope, loc)
    if condition is not None:
        text = f"{text} FILTER (WHERE {condition})"
    return f"sort_array({text})" if isinstance(func, LISTS) else text


def grouping_sets(clause: exp.Group) -> list[list[exp.Expr]]:
    """The grouping sets of a GROUP BY clause: one for plain keys; ROLLUP,
    CUBE and GROUPING SETS expanded, several of them crossed (``GROUP BY a,
    ROLLUP(b)`` is ``(a, b), (a)``), as SQL defines them."""
    parts: list[list[list[exp.Expr]]] = []
    plain: list[exp.Expr] = []
    for item in clause.expressions:
        if isinstance(item, exp.Rollup):
            parts.append(_rollup([_items(e) for e in item.expressions]))
        elif isinstance(item, exp.Cube):
            parts.append(_cube([_items(e) for e in item.expressions]))
        elif isinstance(item, exp.GroupingSets):
            parts.append([_items(e) for e in item.expressions])
        else:
            plain.append(item)
    if clause.args.get("rollup"):  # GROUP BY a, b WITH ROLLUP
        parts.append(_rollup([[e] for e in plain]))
        plain = []
    elif clause.args.get("cube"):
        parts.append(_cube([[e] for e in plain]))
        plain = []
    sets = [plain]
    for part in parts:
        sets = [[*s, *extra] for s, extra in product(sets, part)]
    return sets


def _items(node: exp.Expr) -> list[exp.Expr]:
    """``(a, b)`` as its expressions, ``()`` as none, anything else as itself."""
    if isinstance(node, exp.Tuple):
        return list(node.expressions)
    if isinstance(node, exp.Paren):
        return [node.this]
    return [node]


def _rollup(items: list[list[exp.Expr]]) -> list[list[exp.Expr]]:
    return [[e for item in items[:n] for e in item] for n in range(len(items), -1, -1)]


def _cube(items: list[list[exp.Expr]]) -> list[list[exp.Expr]]:
    return [
        [e for item in chosen for e in item]
        for n in range(len(items), -1, -1)
        for chosen in combinations(items, n)
    ]


def _unique(exprs: list[exp.Expr]) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    for e in exprs:
        if e not in out:
            out.append(e)
    return out


def group(rel: Rel, select: exp.Select, items: list[exp.Expr], names: Names, loc: Located) -> Rel:
    """The relation grouped by the query's GROUP BY (one group if there is none),
    with one column per group key and per aggregate call in ``items``."""
    clause = select.args.get("group")
    sets = grouping_sets(clause) if clause else [[]]
    keys = _unique([k for s in sets for k in s])
    column_of: list[str] = []
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
        column_of.append(column)
    by = list(dict.fromkeys(column_of))
    aggregates: dict[str, agg.Aggregate] = {}
    for call in aggregate_calls(items):
        name = names.hidden("agg")
        aggregates[name] = _aggregate(call, rel.scope, loc)
        after.replacements.append((call, name))
    flags: dict[str, list[exp.Expr]] = {}
    for call in _grouping_calls(items):
        args = list(call.expressions) or keys  # GROUPING_ID(): every key
        for arg in args:
            if arg not in keys:
                raise loc.error(f"{call.key.upper()} of '{arg.sql()}', not a GROUP BY key", call)
        name = names.hidden("grouping")
        flags[name] = args
        after.replacements.append((call, name))
    pre = rel.extend(**computed).coll

    def grouped_by(columns: list[str]) -> Collection:
        if aggregates:
            return pre.aggregate(columns, **aggregates)
        return pre.select(*columns).distinct()  # GROUP BY without aggregates: the groups

    if len(sets) == 1 and not flags:
        return Rel(grouped_by(by), after)
    parts = []
    types = {f.name: f.dataType for f in pre.node.schema.fields}
    for grouping_set in sets:
        present = {column_of[keys.index(k)] for k in grouping_set}
        part = grouped_by([c for c in by if c in present])
        named = {c: named_column(c) if c in present else cast_literal(None, types[c]) for c in by}
        named |= {a: named_column(a) for a in aggregates}
        for name, args in flags.items():
            absent = [int(column_of[keys.index(a)] not in present) for a in args]
            named[name] = cast_literal(int("".join(map(str, absent)), 2), LongType())
        parts.append(part.select(**named))
    return Rel(parts[0].concat(*parts[1:]), after)


def _grouping_calls(items: list[exp.Expr]) -> list[exp.Expr]:
    """``GROUPING(…)`` and ``GROUPING_ID(…)`` calls in ``items``, each once."""
    return _unique([n for i in items for n in walk_local(i) if isinstance(n, GROUPING_CALLS)])
