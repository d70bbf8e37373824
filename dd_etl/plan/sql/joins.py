"""Joins of two relations from their ON conditions.

The conditions are split into conjuncts and each finds its place:

- ``l = r`` (or ``IS NOT DISTINCT FROM``) with each side over one input: a key
  pair, computed into a column when it is an expression;
- a condition over one input only: on an inner join (or the inner side of an
  outer join) a filter of that input before the join; on the preserved side of
  an outer join a *guard key*: the input gets a column ``1`` where the condition
  holds and ``0`` elsewhere, the other input the constant ``1``, so rows where it
  fails find no partner and are padded, exactly as SQL says;
- anything else: a filter after an inner join; refused on outer joins.

Without any key the join is a cross join on a constant key: correct, but every
change meets the whole other input (``explain`` marks it).
"""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from dd_etl.plan.sql.errors import Located
from dd_etl.plan.sql.relation import Rel
from dd_etl.plan.sql.scope import Names, references, translate

How = Literal["inner", "left", "right", "full"]
CROSS_KEY = "cross"
"""Base name of the constant key of a cross join (``explain`` recognises it)."""


def conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    """The conjuncts of a condition. A conjunct of every branch of an OR is one
    too: ``(a = b AND x) OR (a = b AND y)`` is ``a = b AND (x OR y)``, in SQL's
    three-valued logic as in two, so a join key repeated in each branch (TPC-H
    Q19) still makes an equi-join, not a filtered cross join."""
    if node is None:
        return []
    node = node.unnest()
    if isinstance(node, exp.And):
        return [*conjuncts(node.left), *conjuncts(node.right)]
    if isinstance(node, exp.Or):
        return _factored(node)
    return [node]


def _factored(node: exp.Or) -> list[exp.Expr]:
    """The conjuncts common to every branch of ``node``, then the OR of the rest."""
    branches = [conjuncts(branch) for branch in node.flatten()]
    first, others = branches[0], branches[1:]
    common = [c for i, c in enumerate(first) if c not in first[:i] and all(c in b for b in others)]
    if not common:
        return [node]
    rests = [[c for c in b if c not in common] for b in branches]
    if any(not rest for rest in rests):  # (a) OR (a AND y) is a
        return common
    return [*common, exp.or_(*(exp.and_(*rest) for rest in rests))]


def join_order(aliases: list[str], conditions: list[exp.Expr]) -> list[int]:
    """An order of inner-joined FROM items (their indexes; the first stays first)
    in which each item that can meets those before it on an equality. For
    ``FROM part, supplier, lineitem WHERE p_partkey = l_partkey AND s_suppkey =
    l_suppkey`` lineitem comes second: as written, the first join would be a
    cross join of part and supplier."""
    order, joined = [0], {aliases[0]}
    waiting = list(range(1, len(aliases)))
    while waiting:
        meets = (i for i in waiting if _meets(aliases[i], joined, conditions))
        chosen = next(meets, waiting[0])
        order.append(chosen)
        joined.add(aliases[chosen])
        waiting.remove(chosen)
    return order


def _meets(alias: str, joined: set[str], conditions: list[exp.Expr]) -> bool:
    """Whether an equality of ``conditions`` has one side over ``alias`` alone and
    the other over ``joined``: a join key."""
    for cond in conditions:
        if isinstance(cond, exp.EQ | exp.NullSafeEQ):
            a, b = references(cond.left), references(cond.right)
            if a and b and ((a <= joined and b == {alias}) or (b <= joined and a == {alias})):
                return True
    return False


def _side_of(node: exp.Expr, left: set[str], right: set[str]) -> str | None:
    refs = references(node)
    if refs <= left:
        return "left"
    if refs <= right:
        return "right"
    return None


def join(left: Rel, right: Rel, how: How, on: list[exp.Expr], names: Names, loc: Located) -> Rel:
    la, ra = left.scope.aliases, right.scope.aliases
    pairs: list[tuple[exp.Expr, exp.Expr, bool]] = []
    left_filters: list[exp.Expr] = []
    right_filters: list[exp.Expr] = []
    left_guards: list[exp.Expr] = []
    right_guards: list[exp.Expr] = []
    after: list[exp.Expr] = []
    for cond in on:
        if isinstance(cond, exp.EQ | exp.NullSafeEQ):
            a, b = cond.left, cond.right
            sa, sb = _side_of(a, la, ra), _side_of(b, la, ra)
            if references(a) and references(b) and {sa, sb} == {"left", "right"}:
                lhs, rhs = (a, b) if sa == "left" else (b, a)
                pairs.append((lhs, rhs, isinstance(cond, exp.NullSafeEQ)))
                continue
        refs = references(cond)
        if not refs:  # a constant: decides on the side that may be padded
            side = "right" if how == "left" else "left"
        else:
            side = _side_of(cond, la, ra) or "both"
        if side == "left":
            (left_filters if how in ("inner", "right") else left_guards).append(cond)
        elif side == "right":
            (right_filters if how in ("inner", "left") else right_guards).append(cond)
        elif how == "inner":
            after.append(cond)
        else:
            raise loc.unsupported(
                f"a condition of a {how.upper()} JOIN over both inputs that is not an equality",
                cond,
                "only equalities between the two sides, and conditions on one side, are",
            )
    for cond in left_filters:
        left = left.filter(translate(cond, left.scope, loc))
    for cond in right_filters:
        right = right.filter(translate(cond, right.scope, loc))

    lk: list[str] = []
    rk: list[str] = []
    lnew: dict[str, str] = {}
    rnew: dict[str, str] = {}

    def key(expr: exp.Expr, rel: Rel, new: dict[str, str]) -> str:
        if isinstance(expr, exp.Column) and (expr.table, expr.name) in rel.scope.columns:
            return rel.scope.columns[(expr.table, expr.name)]
        name = names.hidden("key")
        new[name] = translate(expr, rel.scope, loc)
        return name

    for lhs, rhs, _ in pairs:
        lk.append(key(lhs, left, lnew))
        rk.append(key(rhs, right, rnew))
    null_safe = any(ns for _, _, ns in pairs)
    if null_safe and not all(ns for _, _, ns in pairs):
        # One join mode for all keys: NULL-safe, plus a guard that the strict
        # keys are not NULL (1 on the left, 1 on the right: 0 and 2 never meet).
        strict = [(lk[i], rk[i]) for i, (_, _, ns) in enumerate(pairs) if not ns]
        lg, rg = names.hidden("strict"), names.hidden("strict")
        lnew[lg] = _all_present([lnew.get(k) or f"`{k}`" for k, _ in strict], 0)
        rnew[rg] = _all_present([rnew.get(k) or f"`{k}`" for _, k in strict], 2)
        lk.append(lg)
        rk.append(rg)
    for guards, own, other, own_k, other_k, rel in (
        (left_guards, lnew, rnew, lk, rk, left),
        (right_guards, rnew, lnew, rk, lk, right),
    ):
        for cond in guards:
            g, h = names.hidden("on"), names.hidden("on")
            own[g] = f"IF(COALESCE({translate(cond, rel.scope, loc)}, FALSE), 1, 0)"
            other[h] = "1"
            own_k.append(g)
            other_k.append(h)
    if not lk:
        g, h = names.hidden(CROSS_KEY), names.hidden(CROSS_KEY)
        lnew[g] = rnew[h] = "1"
        lk.append(g)
        rk.append(h)
    left, right = left.extend(**lnew), right.extend(**rnew)
    joined = left.coll.join(right.coll, left_on=lk, right_on=rk, how=how, null_safe=null_safe)
    out = Rel(joined, left.scope.merged(right.scope))
    for cond in after:
        out = out.filter(translate(cond, out.scope, loc))
    return out


def _all_present(exprs: list[str], otherwise: int) -> str:
    test = " AND ".join(f"({e}) IS NOT NULL" for e in exprs)
    return f"IF({test}, 1, {otherwise})"
