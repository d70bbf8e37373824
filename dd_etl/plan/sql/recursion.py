"""``WITH RECURSIVE``: a recursive CTE is a loop (``Collection.iterate``).

    WITH RECURSIVE reach(node) AS (
        SELECT node FROM roots                       -- the base
        UNION
        SELECT e.dst FROM reach r JOIN edges e ON r.node = e.src   -- the step
    )

With ``UNION`` the CTE is the least set ``R = DISTINCT(base + step(R))``; with
``UNION ALL`` the bag ``R = base + step(R)``, which is what evaluating the
step on each new batch of rows adds up to, as the step reads ``R`` once
(linear recursion, as the SQL standard requires). Both are fixed points the
loop reaches from ``base``, and maintains under changes of every table.
Each column takes the type both parts fit in, as UNION does.
"""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import DataType
from sqlglot import exp

from dd_etl.plan.dataflow import Collection
from dd_etl.plan.sql.coercion import common_type
from dd_etl.plan.sql.query_compiler import QueryCompiler
from dd_etl.plan.sql.relation import Ctes, Output


def reads(node: exp.Expr, name: str) -> int:
    """How often ``node`` reads the table ``name``."""
    return sum(1 for t in node.find_all(exp.Table) if t.name.lower() == name.lower())


def recursive_cte(compiler: QueryCompiler, cte: exp.CTE, scope: Ctes) -> Output:
    loc = compiler.loc
    name = cte.alias_or_name
    body = cte.this
    if not isinstance(body, exp.Union) or body.args.get("order") or body.args.get("limit"):
        raise loc.error(
            f"recursive CTE '{name}' must be `base UNION [ALL] step`, without ORDER BY or LIMIT",
            cte,
        )
    base, step = body.left, body.right
    if reads(base, name):
        raise loc.error(f"the base of recursive CTE '{name}' (before UNION) reads '{name}'", base)
    if reads(step, name) != 1:
        raise loc.error(
            f"the step of recursive CTE '{name}' (after UNION) must read '{name}' exactly once",
            step,
        )
    distinct = bool(body.args.get("distinct"))
    start = compiler.query(base, scope)
    names = [c.name for c in cte.args["alias"].columns] if cte.args.get("alias") else []
    names = names or start.names
    if len(names) != len(start.names):
        raise loc.error(
            f"recursive CTE '{name}' names {len(names)} columns but its base has "
            f"{len(start.names)}",
            cte,
        )
    base_types = [f.dataType for f in start.coll.node.schema.fields]
    step_types: list[DataType] = []

    def build(types: list[DataType]) -> Collection:
        base = _cast(start.coll, start.coll.columns, types)

        def loop(current: Collection) -> Collection:
            out = compiler.query(step, {**scope, name: Output(current, names)})
            if len(out.names) != len(names):
                raise loc.error(
                    f"the step of recursive CTE '{name}' has {len(out.names)} columns, "
                    f"its base {len(names)}",
                    step,
                )
            step_types[:] = [f.dataType for f in out.coll.node.schema.fields]
            both = base.concat(_cast(out.coll, base.columns, types))
            return both.distinct() if distinct else both

        return (base.distinct() if distinct else base).iterate(loop)

    coll = build(base_types)
    # The columns take the type both parts fit in (an INT base, a BIGINT step: BIGINT).
    wider = [common_type(a, b) for a, b in zip(base_types, step_types, strict=True)]
    for column, (a, b, w) in enumerate(zip(base_types, step_types, wider, strict=True)):
        if w is None:
            raise loc.error(
                f"recursive CTE '{name}' column '{names[column]}' is {a.simpleString()} in "
                f"its base and {b.simpleString()} in its step",
                cte,
            )
    if wider != base_types:
        coll = build([w for w in wider if w is not None])
    return Output(coll, names)


def _cast(coll: Collection, columns: list[str], types: list[DataType]) -> Collection:
    fields = coll.node.schema.fields
    if [f.dataType for f in fields] == types and coll.columns == columns:
        return coll
    return coll.select(
        *[F.col(f.name).cast(t).alias(c) for f, c, t in zip(fields, columns, types, strict=True)]
    )
