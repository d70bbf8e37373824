"""``explain``: the differential plan that maintains a view, as indented text."""

from __future__ import annotations

from dd_etl.pipeline.build import Pipeline
from dd_etl.plan import nodes as n
from dd_etl.plan.dataflow import Collection, PlanError


def explain_view(pipeline: Pipeline, view: str) -> str:
    if view not in pipeline.flow.views:
        raise PlanError(f"unknown view {view!r}; views are {sorted(pipeline.flow.views)}")
    collection = pipeline.collections[view]
    try:
        from dd_etl.plan.sql import explain  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return plan_tree(collection)
    text: str = explain(collection)
    return text


def plan_tree(collection: Collection) -> str:
    """One line per operator, inputs indented below; shared nodes shown once."""
    lines: list[str] = []
    seen: set[str] = set()

    def describe(node: n.Node) -> str:
        label = type(node).__name__
        if isinstance(node, n.Source | n.View):
            label += f" {node.name}"
        if isinstance(node, n.Arrange | n.Reduce | n.Accumulate):
            label += f" by {list(node.key)}"
        if isinstance(node, n.Reduce):
            label += f" {node.kind}"
        if isinstance(node, n.Filter):
            label += f" {node.predicate}"
        if isinstance(node, n.Join):
            label += f" {list(node.left_key)} = {list(node.right_key)}"
        trace = f"  [trace {node.trace_name}]" if node.trace_name else ""
        return f"{label} → {node.columns}{trace}"

    def visit(node: n.Node, depth: int) -> None:
        pad = "  " * depth
        if node.id in seen:
            lines.append(f"{pad}{type(node).__name__} {node.id} (shown above)")
            return
        seen.add(node.id)
        lines.append(pad + describe(node))
        if isinstance(node, n.Source):
            return
        for i in node.inputs:
            visit(i, depth + 1)

    visit(collection.node, 0)
    return "\n".join(lines)
