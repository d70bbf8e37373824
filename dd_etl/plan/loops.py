"""What a loop's plan holds: which nodes run inside it, how deeply nested, which
keep product-time history. Pure functions of plan nodes (no Spark), apart from
``iteration.py``, which builds loops."""

from __future__ import annotations

from dd_etl.plan import nodes as n


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
    return nodes_between(loop.result, loop.variable)


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


def histories_read(loop: n.Iterate) -> list[n.Node]:
    """The nodes whose history from earlier epochs the loop nest reads: its own
    traces, and the arrangements outside it that its joins look keys up in."""
    nest = loop_nest(loop)
    outside = {
        i.id: i
        for x, _ in nest.values()
        if isinstance(x, n.Join)
        for i in x.inputs
        if i.id not in nest
    }
    return [*inner_traces(loop), *outside.values()]


def nodes_between(result: n.Node, variable: n.Variable) -> list[n.Node]:
    """The nodes from ``variable`` up to ``result`` (those reading the variable),
    the variable first, inputs before their users."""
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
