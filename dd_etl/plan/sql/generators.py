"""Generators: ``LATERAL VIEW [OUTER] explode(…) e AS x`` and ``explode(…)`` in the
select list (DuckDB's ``unnest``), as ``Collection.generate``.

A generator maps each row to the rows it generates, so it is linear: a change
of a row is the change of its generated rows, and nothing is kept. As in Spark,
LATERAL VIEWs apply to the FROM clause's rows, before WHERE, and a generator of
the select list to the rows the query projects, after grouping and windows.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dd_etl.errors import PlanError
from dd_etl.plan.sql.errors import Located, rejection
from dd_etl.plan.sql.relation import Rel
from dd_etl.plan.sql.scope import Names, Scope, translate

OUTER = {"EXPLODE": "EXPLODE_OUTER", "POSEXPLODE": "POSEXPLODE_OUTER", "INLINE": "INLINE_OUTER"}
"""The generators with an OUTER form: a row generating nothing is kept, with NULLs."""


def lateral_views(rel: Rel, laterals: list[exp.Expr], names: Names, loc: Located) -> Rel:
    """``rel`` with each LATERAL VIEW's columns, in order (one may read another's)."""
    for lateral in laterals:
        if not isinstance(lateral, exp.Lateral) or not lateral.args.get("view"):
            raise loc.unsupported("LATERAL with a subquery", lateral, "LATERAL VIEW is")
        alias = lateral.args.get("alias")
        columns = [c.name for c in alias.columns] if alias is not None else []
        if alias is None or not columns:
            raise loc.error(
                "name the columns of a LATERAL VIEW: LATERAL VIEW explode(items) e AS item",
                lateral,
            )
        text = translate(lateral.this, rel.scope, loc)
        if lateral.args.get("outer"):
            text = _outer(text, lateral, loc)
        fresh = [names.fresh(c) for c in columns]
        rel = _generate(rel, text, fresh, lateral, loc)
        made = {(alias.name, c.lower()): f for c, f in zip(columns, fresh, strict=True)}
        rel = Rel(rel.coll, Scope({**rel.scope.columns, **made}, rel.scope.replacements))
    return rel


def select_generator(rel: Rel, projections: list[exp.Expr], names: Names, loc: Located) -> Rel:
    """``rel`` with the column of the select list's generator, if it has one: the
    projection then reads the generated value as that column."""
    generators = [p.unalias() for p in projections if isinstance(p.unalias(), exp.Explode)]
    if not generators:
        return rel
    if len(generators) > 1:
        raise loc.unsupported(
            "more than one generator in a select list", generators[1], "use LATERAL VIEW"
        )
    generator = generators[0]
    if isinstance(generator, exp.Posexplode):
        raise loc.unsupported(
            "POSEXPLODE in the select list",
            generator,
            "use LATERAL VIEW posexplode(items) e AS pos, item",
        )
    column = names.hidden("generated")
    rel = _generate(rel, translate(generator, rel.scope, loc), [column], generator, loc)
    scope = rel.scope
    return Rel(
        rel.coll, Scope(scope.columns, [*scope.replacements, (generator, column)], scope.grouped)
    )


def _generate(rel: Rel, text: str, columns: list[str], node: exp.Expr, loc: Located) -> Rel:
    try:
        return Rel(rel.coll.generate(text, *columns), rel.scope)
    except PlanError as e:
        raise loc.error(rejection(e), node) from e


def _outer(text: str, lateral: exp.Expr, loc: Located) -> str:
    name = re.match(r"\w+", text)
    outer = OUTER.get(name.group(0).upper()) if name else None
    if name is None or outer is None:
        raise loc.unsupported(
            "LATERAL VIEW OUTER of this generator",
            lateral,
            "of EXPLODE, POSEXPLODE and INLINE it is",
        )
    return outer + text[name.end() :]
