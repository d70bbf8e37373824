"""``explain``: the differential plan of a collection, as an indented tree.

Each operator is one line; nodes that keep a trace show its name and key (what
it is indexed by), so the cost and storage of a view can be read off. Shared
sub-plans (an arrangement used by two joins) are printed once and referred to
afterwards. Operators whose work per change is not bounded by the change are
marked ``[not incremental: …]``.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql.types import StructType

from dd_etl.operators.reduce import sides
from dd_etl.plan import nodes as n
from dd_etl.plan.column_names import ColumnName, ColumnText
from dd_etl.plan.dataflow import Collection
from dd_etl.plan.loops import loop_nest
from dd_etl.plan.sql.joins import CROSS_KEY

MAX_TEXT = 90


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _expr(e: Column | str) -> str:
    if isinstance(e, ColumnName):
        return e.name
    if isinstance(e, ColumnText):
        return e.printed
    if isinstance(e, Column):
        text = str(e)
        return text[len("Column<'") : -2] if text.startswith("Column<'") else text
    return e


def _cols(cols: tuple[str, ...] | list[str]) -> str:
    return "(" + ", ".join(cols) + ")"


def trace_key(node: n.Node) -> tuple[str, ...]:
    """The key a node's trace is indexed by (as the runtime creates it)."""
    if isinstance(node, n.Source | n.Arrange | n.Reduce | n.Accumulate):
        return node.key
    return tuple(node.columns)


def describe(node: n.Node) -> str:
    if isinstance(node, n.Source):
        return f"source {node.name}"
    if isinstance(node, n.View):
        return f"view {node.name}"
    if isinstance(node, n.Constant):
        return f"constant ({len(node.rows)} rows)"
    if isinstance(node, n.Select):
        parts = [_expr(e) for e in node.exprs] + [
            name if _expr(e).strip("`") == name else f"{name} = {_expr(e)}"
            for name, e in node.named
        ]
        return _short("select " + ", ".join(parts))
    if isinstance(node, n.Filter):
        return _short(f"filter {_expr(node.predicate)}")
    if isinstance(node, n.Explode):
        return f"generate {_expr(node.generator)} as {', '.join(node.names)}"
    if isinstance(node, n.Join):
        mode = " null-safe" if node.null_safe else ""
        return f"join{mode} {_cols(node.left_key)} = {_cols(node.right_key)}"
    if isinstance(node, n.Arrange):
        return f"arrange by {_cols(node.key)}"
    if isinstance(node, n.Reduce):
        order = ", ".join(c + (" desc" if d else "") for c, d in node.order)
        calls = " " + ", ".join(f"{name} = {call}" for name, call in node.calls)
        detail = {
            "count": f" as {node.column}",
            "min": f" of {node.column}",
            "max": f" of {node.column}",
            "top_k": f" {node.limit} by {order}" + _numbering(node),
            "min_max": _first_row(node),
            "threshold": f" multiplicity {node.multiplicity}",
            "window": calls,
            "running": calls + " (rows after their partition's last one add to its totals,"
            " read beside it; any other change re-evaluates its partition)",
            "aggregate": calls,
        }.get(node.kind, "")
        return f"reduce {node.kind}{detail} per {_cols(node.key)}"
    if isinstance(node, n.Accumulate):
        return f"accumulate count/sum of {_cols(node.values)} per {_cols(node.key)}"
    if isinstance(node, n.Iterate):
        return f"iterate to a fixed point (at most {node.limit} iterations per epoch)"
    if isinstance(node, n.Variable):
        return "loop variable: the first input, then each iteration's result"
    return type(node).__name__.lower()


def _numbering(node: n.Reduce) -> str:
    return "" if node.numbering == "row_number" else f" with ties ({node.numbering})"


def _first_row(node: n.Reduce) -> str:
    """A ``min_max`` carrying a whole row (``Collection.first_row``) says so."""
    carried = sides(node.schema.fieldNames())
    if len(carried) != 1 or not isinstance(node.schema[carried[0][0]].dataType, StructType):
        return ""
    return (
        f" first row ({carried[0][1]} by its order: an insertion compares with the"
        " current row, only a retraction of it reads its key's history)"
    )


def warning(node: n.Node) -> str | None:
    """Why the node's work per change is not bounded by the change, if it is not."""
    if isinstance(node, n.Join) and any(k.startswith(f"__{CROSS_KEY}") for k in node.left_key):
        return "cross join: each change meets the whole other input"
    if isinstance(node, n.Reduce):
        if not node.key and node.kind == "window":
            return "one partition: each change re-evaluates the window over the whole input"
        if not node.key and node.kind in ("top_k", "general", "count", "aggregate"):
            return "one group: each change re-reduces the whole input"
        if node.kind == "general":
            return "a Python reduction"
    return None


def explain(view: Collection) -> str:
    lines: list[str] = []
    seen: dict[str, int] = {}

    def visit(
        node: n.Node, prefix: str, tail: bool, top: bool, loop: n.Iterate | None = None
    ) -> None:
        branch = "" if top else ("└─ " if tail else "├─ ")
        text = describe(node)
        if node.id in seen:
            lines.append(f"{prefix}{branch}{text}  (shared: see #{seen[node.id]})")
            return
        seen[node.id] = len(seen) + 1
        notes = [f"#{seen[node.id]}"]
        inner = loop is not None and node.id in loop_nest(loop)
        if node.trace_name is not None and not (inner and isinstance(node, n.Iterate)):
            name = loop.inner_trace_name(node) if loop is not None and inner else node.trace_name
            notes.append(f"trace {name} key {_cols(trace_key(node))}")
        why = warning(node)
        if why:
            notes.append(f"[not incremental: {why}]")
        lines.append(f"{prefix}{branch}{text}  " + "  ".join(notes))
        child = prefix + ("" if top else ("   " if tail else "│  "))
        subs = node.inputs
        if isinstance(node, n.Iterate):
            subs = (node.result, *node.inputs)  # the body first, then what enters it
            loop = loop if inner else node  # a nested loop's traces are the top loop's
        elif not inner:
            loop = None
        for i, sub in enumerate(subs):
            visit(sub, child, i == len(subs) - 1, False, loop)

    visit(view.node, "", True, True)
    return "\n".join(lines)
