"""Window functions in a query: the calls of one ``PARTITION BY`` become columns
of one window reduction keyed by it (``Collection.window``).

As in SQL, windows are evaluated after WHERE, GROUP BY and HAVING, so their
arguments may be group keys and aggregates, and before the projection,
QUALIFY, DISTINCT and ORDER BY, which read their values as columns.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from dd_etl.errors import PlanError
from dd_etl.operators.reduce import Numbering
from dd_etl.operators.running import running_calls
from dd_etl.plan.sql.errors import Located, rejection, spark_reason
from dd_etl.plan.sql.joins import conjuncts
from dd_etl.plan.sql.relation import Rel
from dd_etl.plan.sql.scope import Names, Scope, translate, translate_window, walk_local
from dd_etl.sql_text import quote


def window_calls(items: list[exp.Expr]) -> list[exp.Window]:
    """The window calls in ``items`` (outside nested queries), each once."""
    calls: list[exp.Window] = []
    for item in items:
        for n in walk_local(item):
            if isinstance(n, exp.Window) and n not in calls:
                calls.append(n)
    return calls


def spell_out_named(select: exp.Select, loc: Located) -> exp.Select:
    """The query with each call over a named window (``OVER w``, ``WINDOW w AS
    (...)``) given the definition's partition, order and frame where it has none."""
    definitions = {w.name.lower(): w for w in select.args.get("windows") or []}
    spelt = select.copy()
    spelt.set("windows", None)
    calls = [n for n in walk_local(spelt) if isinstance(n, exp.Window) and n.args.get("alias")]
    if not calls and not definitions:
        return select
    for call in calls:
        named = definitions.get(call.alias.lower())
        if named is None:
            raise loc.error(f"unknown window '{call.alias}'", call)
        out = call.copy()
        out.set("alias", None)
        for part in ("order", "spec"):
            if not out.args.get(part) and named.args.get(part):
                out.set(part, named.args[part].copy())
        if not out.args.get("partition_by"):
            out.set("partition_by", [e.copy() for e in named.args.get("partition_by") or []])
        call.replace(out)
    return spelt


def evaluate(
    rel: Rel, calls: list[exp.Window], qualify: list[exp.Expr], names: Names, loc: Located
) -> Rel:
    """``rel`` with a column per call, one window reduction per distinct
    partition; the scope reads each call as its column. ``qualify``: the QUALIFY
    conjuncts; where one bounds the only call, a ``ROW_NUMBER() <= k`` (or a
    RANK, DENSE_RANK), the rows numbered up to ``k`` in each partition are kept
    first (``first_rows``)."""
    computed: dict[str, str] = {}
    partitions = [_partition(rel, call, computed, names, loc) for call in calls]
    rel = rel.extend(**computed)
    bounds = [b[1:] for c in qualify if (b := numbering_bound(c)) and [b[0]] == calls]
    if bounds:
        k, numbering = min(bounds)
        rel = first_rows(rel, calls[0], partitions[0], k, numbering, names, loc)
        if (k, numbering) == (1, "row_number"):  # each partition keeps one row: the first
            numbered = rel.extend(**{(first := names.hidden("window")): "CAST(1 AS INT)"})
            replacements = [*numbered.scope.replacements, (calls[0], first)]
            return Rel(numbered.coll, Scope(rel.scope.columns, replacements, rel.scope.grouped))
    # one reduction per partition, and one per order of its running aggregates
    by_partition: dict[tuple[Any, ...], dict[str, tuple[exp.Window, str]]] = {}
    for call, partition in zip(calls, partitions, strict=True):
        text = translate_window(call, rel.scope, loc)
        running = running_calls([("_", text)], rel.coll.node.schema, partition)
        group = (partition, None if running is None else running.order)
        by_partition.setdefault(group, {})[names.hidden("window")] = (call, text)
    coll = rel.coll
    replacements = list(rel.scope.replacements)
    for (partition, _), named in by_partition.items():
        texts = {name: text for name, (_, text) in named.items()}
        try:
            coll = coll.window(partition, **texts)
        except PlanError as e:
            for name, (call, text) in named.items():  # the call Spark rejects
                try:
                    coll.window(partition, **{name: text})
                except PlanError as one:
                    raise loc.error(rejection(one), call) from one
            raise loc.error(f"Spark cannot evaluate the window calls: {spark_reason(e)}") from e
        replacements += [(call, name) for name, (call, _) in named.items()]
    return Rel(coll, Scope(rel.scope.columns, replacements, rel.scope.grouped))


def _partition(
    rel: Rel, call: exp.Window, computed: dict[str, str], names: Names, loc: Located
) -> tuple[str, ...]:
    """The columns of the call's PARTITION BY: columns of ``rel`` where the
    expression is one, else computed ones (added to ``computed``, shared)."""
    key: list[str] = []
    for part in call.args.get("partition_by") or []:
        text = translate(part, rel.scope, loc)
        column = next((c for c in rel.coll.columns if quote(c) == text), None)
        if column is None:
            column = next((c for c, t in computed.items() if t == text), None)
        if column is None:
            column = names.hidden("partition")
            computed[column] = text
        if column not in key:
            key.append(column)
    return tuple(key)


NUMBERINGS: dict[type[exp.Expr], Numbering] = {
    exp.RowNumber: "row_number",
    exp.Rank: "rank",
    exp.DenseRank: "dense_rank",
}


def numbering_bound(cond: exp.Expr) -> tuple[exp.Window, int, Numbering] | None:
    """``ROW_NUMBER() OVER (…) <= k`` (or ``< k``, ``= k``, either way round; or
    RANK, DENSE_RANK): the call, ``k`` and how it numbers rows. The condition
    itself still filters the numbered rows; the bound only says none beyond
    ``k`` is needed."""
    flipped: dict[type[exp.Expr], type[exp.Expr]] = {exp.GTE: exp.LTE, exp.GT: exp.LT}
    kind: type[exp.Expr] = type(cond)
    left, right = cond.args.get("this"), cond.args.get("expression")
    if kind in flipped:
        kind, left, right = flipped[kind], right, left
    if not (
        kind in (exp.LTE, exp.LT, exp.EQ)
        and isinstance(left, exp.Window)
        and type(left.this) in NUMBERINGS
        and isinstance(right, exp.Literal)
        and right.is_int
    ):
        return None
    k = int(right.this) - (1 if kind is exp.LT else 0)
    return (left, k, NUMBERINGS[type(left.this)]) if k >= 1 else None


def first_rows(
    rel: Rel,
    call: exp.Window,
    partition: tuple[str, ...],
    k: int,
    numbering: Numbering,
    names: Names,
    loc: Located,
) -> Rel:
    """The rows of each partition the call numbers up to ``k``: what
    ``ROW_NUMBER() <= k`` (RANK, DENSE_RANK) keeps, so a change costs what it
    touches, not its partition. The first row alone is kept as MIN and MAX are
    (``Collection.first_row``); more, or ties, by a hierarchical top-k, which
    re-reads a bucket of the partition and the buckets' top rows. Each order
    item becomes a NULL flag and its value, sorted the same way, so an order
    of one direction stays one."""
    computed: dict[str, str] = {}
    ordering: list[tuple[str, bool]] = []
    order = call.args.get("order")
    for item in order.expressions if order else []:
        text, nulls = translate(item.this, rel.scope, loc), names.hidden("nulls")
        value = next((c for c in rel.coll.columns if quote(c) == text), None)
        if value is None:  # an expression: computed as a column of its own
            value = names.hidden("order")
            computed[value] = text
        first, desc = bool(item.args.get("nulls_first")), bool(item.args.get("desc"))
        # TRUE sorts last ascending and first descending
        computed[nulls] = f"({text}) IS {'' if first == desc else 'NOT '}NULL"
        ordering += [(nulls, desc), (value, desc)]
    extended = rel.extend(**computed)
    if (k, numbering) == (1, "row_number"):
        return Rel(extended.coll.first_row(partition, ordering), rel.scope)
    kept = extended.coll.top_k(partition, ordering, k, hierarchical=True, numbering=numbering)
    return Rel(kept, rel.scope)


def bound_pushed(select: exp.Select) -> exp.Select:
    """``SELECT … FROM (SELECT …, ROW_NUMBER() OVER (…) AS rn …) WHERE rn <= k``
    with the bound also in the inner query's QUALIFY, where it keeps the first
    rows of each partition; the outer WHERE is unchanged."""
    from_ = select.args.get("from_")
    where = select.args.get("where")
    if where is None or from_ is None or select.args.get("joins"):
        return select
    sub = from_.this
    inner = sub.this if isinstance(sub, exp.Subquery) else None
    if not isinstance(inner, exp.Select) or any(
        inner.args.get(a) for a in ("limit", "offset", "qualify")
    ):
        return select
    calls: dict[str, exp.Expr] = {p.alias_or_name: p.unalias() for p in inner.expressions}

    def inlined(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and n.table == sub.alias_or_name and n.name in calls:
            return calls[n.name].copy()
        return n

    inner_conds = [c.copy().transform(inlined) for c in conjuncts(where.this)]
    bounds = [c for c in inner_conds if numbering_bound(c)]
    if not bounds:
        return select
    out = select.copy()
    out.args["from_"].this.this.set("qualify", exp.Qualify(this=exp.and_(*bounds)))
    return out
