"""Loops: the plan of ``Collection.iterate``.

The body is an ordinary function of collections, called once on the loop
variable. Whatever it builds that depends on the variable runs inside the loop,
with times ``(epoch, iteration)``; whatever does not (the edges of a graph, the
initial collection) is computed outside and enters the loop at iteration 0, so
loop-invariant work is never repeated per iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from dd_etl.plan import nodes as n
from dd_etl.plan.fingerprint import node_id

if TYPE_CHECKING:
    from dd_etl.plan.dataflow import Collection

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


def build_iterate(
    initial: Collection, body: Callable[[Collection], Collection], limit: int
) -> Collection:
    from dd_etl.plan.dataflow import Collection, PlanError

    if limit < 1:
        raise PlanError(f"iterate: max_iterations must be ≥ 1, not {limit}")
    flow, schema = initial.flow, initial.node.schema

    def apply(variable: n.Variable) -> Collection:
        result = body(Collection(flow, variable))
        if not isinstance(result, Collection):
            kind = type(result).__name__
            raise PlanError(f"iterate: the body must return a collection, not {kind}")
        return result

    # The variable is named after what the body makes of it, so two loops from the
    # same collection (say, inside one outer loop) never share a variable.
    probe = apply(n.Variable(node_id("variable", (initial.node.id,), schema), (), schema))
    named = node_id("variable", (initial.node.id,), schema, body=probe.node.id)
    variable = n.Variable(named, (), schema)
    result = apply(variable)
    if _shape(result.node.schema) != _shape(schema):
        raise PlanError(
            f"iterate: the body must return the loop variable's columns "
            f"{_describe(schema)}, but returned {_describe(result.node.schema)}"
        )
    inner = _inner(result.node, variable)
    for node in inner:
        if not isinstance(node, INNER_OPERATORS):
            raise PlanError(
                f"iterate: {type(node).__name__.lower()} cannot run inside a loop yet "
                f"(inside a loop: {', '.join(c.__name__.lower() for c in INNER_OPERATORS[1:])})"
            )
    ids = {x.id for x in inner}
    entering = [result.node] if result.node.id not in ids else []
    entering += [i for x in inner for i in x.inputs if i.id not in ids]
    inputs = tuple({x.id: x for x in [initial.node, *entering]}.values())
    params = dict(variable=variable.id, result=result.node.id)
    loop = n.Iterate(
        node_id("iterate", tuple(i.id for i in inputs), schema, **params),
        inputs,
        schema,
        variable=variable,
        result=result.node,
        limit=limit,
    )
    return Collection(flow, loop)


def reads_loop_variable(node: n.Node) -> bool:
    """Whether ``node`` is being built inside a loop's body."""
    seen: set[str] = set()

    def visit(x: n.Node) -> bool:
        if x.id in seen:
            return False
        seen.add(x.id)
        return isinstance(x, n.Variable) or any(visit(i) for i in x.inputs)

    return visit(node)


def body_of(loop: n.Iterate) -> list[n.Node]:
    """The nodes that run inside ``loop`` (those that read its variable), inputs
    before their users."""
    return _inner(loop.result, loop.variable)


def loop_nest(loop: n.Iterate) -> dict[str, tuple[n.Node, int]]:
    """Every node that runs inside ``loop`` or inside a loop nested in it, by id,
    with its depth: how many loops enclose it (1 for ``loop``'s own body). A node
    at depth ``d`` has times ``(epoch, i1, …, id)``. Inputs come before users."""
    nest: dict[str, tuple[n.Node, int]] = {}

    def add(inner: n.Iterate, depth: int) -> None:
        for node in body_of(inner):
            nest[node.id] = (node, depth)
            if isinstance(node, n.Iterate):
                add(node, depth + 1)

    add(loop, 1)
    return nest


def inner_traces(loop: n.Iterate) -> list[n.Node]:
    """The nodes of the loop nest that keep product-time history across epochs."""
    return [x for x, _ in loop_nest(loop).values() if isinstance(x, n.Arrange | n.Reduce)]


def _inner(result: n.Node, variable: n.Variable) -> list[n.Node]:
    inside: dict[str, bool] = {}
    order: list[n.Node] = []

    def visit(node: n.Node) -> bool:
        if node.id not in inside:
            flags = [visit(i) for i in node.inputs]
            inside[node.id] = node.id == variable.id or any(flags)
            if inside[node.id]:
                order.append(node)
        return inside[node.id]

    visit(result)
    if variable.id not in inside:
        order.insert(0, variable)
    return order


def _shape(schema: StructType) -> list[tuple[str, str]]:
    """Names and types; nullability may differ (``dist + 1`` is nullable, ``0`` is not)."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def _describe(schema: StructType) -> str:
    return "(" + ", ".join(f"{name} {kind}" for name, kind in _shape(schema)) + ")"
