"""Loops: the plan of ``Collection.iterate``.

The body is an ordinary function of collections, called once on the loop
variable. Whatever it builds that depends on the variable runs inside the loop,
with times ``(epoch, iteration)``; whatever does not (the edges of a graph, the
initial collection) is computed outside and enters the loop at iteration 0, so
loop-invariant work is never repeated per iteration.

The loop is planned on the nodes behind the collections (``Collection.iterate``
hands the body's nodes in and out), so it sits beneath the collection API.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from dd_etl.errors import PlanError
from dd_etl.plan import nodes as n
from dd_etl.plan.fingerprint import node_id
from dd_etl.plan.loops import nodes_between

DEFAULT_ITERATION_LIMIT = 1000
"""Iterations one epoch of a loop may take before it counts as not converging."""

INNER_OPERATORS = (
    n.Variable,
    n.Select,
    n.Filter,
    n.Explode,
    n.Concat,
    n.Negate,
    n.Consolidate,
    n.Arrange,
    n.Join,
    n.Reduce,
    n.Iterate,
)
"""What may run inside a loop, a loop included. COUNT/SUM inside a loop are built
as reductions (``Collection.accumulate``), multi-way joins as chains of joins
(``Collection.join_all``)."""


def build_iterate(initial: n.Node, body: Callable[[n.Variable], n.Node], limit: int) -> n.Iterate:
    """The loop that starts from ``initial`` and repeats ``body``: the node of the
    variable's next value, built on the variable's node."""
    if limit < 1:
        raise PlanError(f"iterate: max_iterations must be ≥ 1, not {limit}")
    schema = initial.schema

    # The variable is named after what the body makes of it, so two loops from the
    # same collection (say, inside one outer loop) never share a variable. It holds
    # what enters and what the body returns, so a column is nullable if either
    # side's is (``SELECT 0`` is not, a joined ``e.dst`` may be); a wider variable
    # may widen the body, so this repeats until nothing changes.
    while True:
        probe = body(n.Variable(node_id("variable", (initial.id,), schema), (), schema))
        wider = _nullable_union(schema, probe.schema)
        if wider == schema:
            break
        schema = wider
    named = node_id("variable", (initial.id,), schema, body=probe.id)
    variable = n.Variable(named, (), schema)
    result = body(variable)
    if _shape(result.schema) != _shape(schema):
        raise PlanError(
            f"iterate: the body must return the loop variable's columns "
            f"{_describe(schema)}, but returned {_describe(result.schema)}"
        )
    inner = nodes_between(result, variable)
    for node in inner:
        if not isinstance(node, INNER_OPERATORS):
            raise PlanError(
                f"iterate: {type(node).__name__.lower()} cannot run inside a loop yet "
                f"(inside a loop: {', '.join(c.__name__.lower() for c in INNER_OPERATORS[1:])})"
            )
    ids = {x.id for x in inner}
    entering = [result] if result.id not in ids else []
    entering += [i for x in inner for i in x.inputs if i.id not in ids]
    inputs = tuple({x.id: x for x in [initial, *entering]}.values())
    params = dict(variable=variable.id, result=result.id)
    return n.Iterate(
        node_id("iterate", tuple(i.id for i in inputs), schema, **params),
        inputs,
        schema,
        variable=variable,
        result=result,
        limit=limit,
    )


def _shape(schema: StructType) -> list[tuple[str, str]]:
    """Names and types; nullability may differ (``dist + 1`` is nullable, ``0`` is not)."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _nullable_union(schema: StructType, other: StructType) -> StructType:
    """``schema`` nullable wherever ``other`` is, nested fields and elements too;
    unchanged when the columns differ (that is reported once the body is built)."""
    if _shape(schema) != _shape(other):
        return schema
    wider = _wider(schema, other)
    assert isinstance(wider, StructType)
    return wider


def _wider(a: DataType, b: DataType) -> DataType:
    if isinstance(a, StructType) and isinstance(b, StructType):
        return StructType(
            [
                StructField(
                    f.name, _wider(f.dataType, g.dataType), f.nullable or g.nullable, f.metadata
                )
                for f, g in zip(a.fields, b.fields, strict=True)
            ]
        )
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(_wider(a.elementType, b.elementType), a.containsNull or b.containsNull)
    if isinstance(a, MapType) and isinstance(b, MapType):
        value = _wider(a.valueType, b.valueType)
        return MapType(a.keyType, value, a.valueContainsNull or b.valueContainsNull)
    return a


def _describe(schema: StructType) -> str:
    return "(" + ", ".join(f"{name} {kind}" for name, kind in _shape(schema)) + ")"
