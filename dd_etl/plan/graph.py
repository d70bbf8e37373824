"""The plan graph as pure functions over plan nodes: what a node reads, which
nodes keep traces and which views depend on a node, in which order traces are
computed, and what a trace is keyed by. No Spark, no storage."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence

from dd_etl.operators.linear import referenced_column
from dd_etl.plan import nodes as n


def upstream(roots: Sequence[n.Node], recomputed: Collection[str] = ()) -> list[n.Node]:
    """``roots`` and every node they read, each once, inputs before their users.
    Under a view in ``recomputed`` only sources and views count."""
    seen: dict[str, n.Node] = {}
    passed: set[str] = set()  # under a recomputed view only

    def visit(node: n.Node, kept: bool) -> None:
        kept = kept or isinstance(node, n.Source | n.View)
        if node.id in seen or (not kept and node.id in passed):
            return
        inside = kept and not (isinstance(node, n.View) and node.name in recomputed)
        for i in node.inputs:
            visit(i, inside)
        if kept:
            seen[node.id] = node
        else:
            passed.add(node.id)

    for root in roots:
        visit(root, True)
    return list(seen.values())


def stateful(roots: Sequence[n.Node], recomputed: Collection[str] = ()) -> list[n.Node]:
    """The nodes with a trace that ``roots`` depend on, inputs before users; under a
    view in ``recomputed`` only the sources and views it reads."""
    return [x for x in upstream(roots, recomputed) if x.trace_name is not None]


def dependants(views: Sequence[n.View], of: Collection[str]) -> list[n.View]:
    """The ``views`` that read (directly, or through other nodes) a node whose id
    is in ``of``, in the order given; a view in ``of`` reads itself."""
    return [v for v in views if any(x.id in of for x in upstream([v]))]


def traces_read(node: n.Node) -> list[n.Node]:
    """The nodes with traces that ``node``'s changes are computed from: its nearest
    ancestors that keep one, through the nodes in between that keep none."""
    found: dict[str, n.Node] = {}

    def visit(x: n.Node) -> None:
        for i in x.inputs:
            if i.trace_name is not None:
                found.setdefault(i.id, i)
            else:
                visit(i)

    visit(node)
    return list(found.values())


def memory_operators(node: n.Node) -> int:
    """About how many hash tables and sorts the plan of ``node``'s changes runs in a
    task, each holding memory until the task ends: its own operator's and those of
    the operators between it and the traces it reads. A join's two delta terms
    hash or sort a side each, a reduction hashes the keys it touches, joins their
    history and aggregates it; projections, filters and unions hold nothing."""
    seen: set[str] = set()

    def count(x: n.Node) -> int:
        if x.id in seen:
            return 0
        seen.add(x.id)
        own = _MEMORY_OPERATORS.get(type(x), 0) * (
            len(x.inputs) if isinstance(x, n.DeltaQuery) else 1
        )
        return own + sum(count(i) for i in x.inputs if i.trace_name is None)

    return max(count(node), 1)


_MEMORY_OPERATORS: dict[type[n.Node], int] = {
    n.Join: 2,
    n.DeltaQuery: 2,
    n.Reduce: 3,
    n.Accumulate: 2,
    n.Consolidate: 1,
}


ONE_ROW_PER_KEY = frozenset({"distinct", "count", "min", "max", "min_max", "collapse"})
"""Reductions whose output holds at most one row per key."""


def unique_key(node: n.Node) -> tuple[str, ...] | None:
    """Columns no two of ``node``'s rows share at any time, None when none is known: a
    reduction's key (one row per key) as projections that keep its columns,
    filters, arrangements and joins that match each row at most once pass it on.
    A sink table then finds a row's old version by these columns alone."""
    if isinstance(node, n.Accumulate) or (
        isinstance(node, n.Reduce) and node.kind in ONE_ROW_PER_KEY
    ):
        return node.key
    if isinstance(node, n.View | n.Arrange | n.Filter | n.Consolidate):
        return unique_key(node.inputs[0])
    if isinstance(node, n.Select):
        key = unique_key(node.inputs[0])
        kept: dict[str, str] = {}  # input column -> an output column that is it
        for out, read in passed_through(node).items():
            kept.setdefault(read, out)
        if key is None or any(k not in kept for k in key):
            return None
        return tuple(kept[k] for k in key)
    if isinstance(node, n.Join):
        # each left row meets at most one right row when the right side has one row
        # per join key; NULL keys cannot join twice either way
        left, right = (unique_key(i) for i in node.inputs)
        if left is not None and right is not None and set(right) <= set(node.right_key):
            return left
    return None


def batch_bound(node: n.Node, records: Callable[[n.Node], int], fresh: bool) -> int | None:
    """At most how many updates ``node``'s trace appends for an interval, given the
    ``records`` the traces it reads hold in it, or None when that says nothing.
    An arrangement or a view appends what it reads; a reduction of one row per key
    at most one update per key it reads a change of, two (retraction and
    insertion) unless its trace is ``fresh``, empty before the interval. Bounds
    pass operators that never emit more rows than they read (projections,
    filters, unions), not joins."""
    if isinstance(node, n.Arrange | n.View):
        factor = 1
    elif isinstance(node, n.Accumulate) or (
        isinstance(node, n.Reduce) and node.kind in ONE_ROW_PER_KEY
    ):
        factor = 1 if fresh else 2
    else:
        return None

    def read(x: n.Node) -> int | None:
        if x.trace_name is not None:
            return records(x)
        if not isinstance(x, n.Select | n.Filter | n.Negate | n.Consolidate | n.Concat):
            return None
        return _total([read(i) for i in x.inputs])

    total = _total([read(i) for i in node.inputs])
    return None if total is None else factor * total


def distinct_updates(node: n.Node) -> bool:
    """Whether no two of ``node``'s changes in an interval share data and time, so
    that laying them out as a batch needs no consolidation: an arrangement or a
    view of a trace's own updates (an interval's batches are consolidated and
    disjoint in time), perhaps filtered or negated."""

    def distinct(x: n.Node) -> bool:
        if x.trace_name is not None:
            return True
        return isinstance(x, n.Filter | n.Negate) and distinct(x.inputs[0])

    return isinstance(node, n.Arrange | n.View) and distinct(node.inputs[0])


def _total(parts: Sequence[int | None]) -> int | None:
    return None if not parts or None in parts else sum(p or 0 for p in parts)


def layers(nodes: Sequence[n.Node]) -> list[list[n.Node]]:
    """``nodes`` (those keeping traces, inputs before users) grouped by how many
    traces lie between them and the sources: a layer depends only on earlier ones."""
    depth: dict[str, int] = {}

    def depth_of(node: n.Node) -> int:
        if node.id not in depth:
            below = max((depth_of(i) for i in node.inputs), default=0)
            depth[node.id] = below + (1 if node.inputs and node.trace_name else 0)
        return depth[node.id]

    grouped: dict[int, list[n.Node]] = {}
    for node in nodes:
        grouped.setdefault(depth_of(node), []).append(node)
    return [grouped[d] for d in sorted(grouped)]


def trace_key(node: n.Node) -> tuple[str, ...]:
    """The columns a node's trace is keyed (hashed, sorted, looked up) by."""
    if isinstance(node, n.Source | n.Arrange | n.Reduce | n.Accumulate):
        return node.key
    return tuple(node.columns)


def keyed_by(node: n.Node, key: Sequence[str]) -> bool:
    """Whether ``node`` keeps a trace keyed by exactly ``key``: its changes' key
    hashes are then those of ``key``, in that order."""
    return node.trace_name is not None and trace_key(node) == tuple(key)


def passed_through(select: n.Select) -> dict[str, str]:
    """The output columns of ``select`` that only name an input column, as it is or
    renamed, each with that column (an output named twice is neither)."""
    columns = [(referenced_column(e), referenced_column(e)) for e in select.exprs]
    columns += [(c, referenced_column(e)) for c, e in select.named]
    outputs = Counter(out for out, _ in columns)
    return {
        out: read
        for out, read in columns
        if out is not None and read is not None and outputs[out] == 1
    }


def columns_read(source: n.Source, nodes: Iterable[n.Node]) -> frozenset[str]:
    """The columns of ``source`` that ``nodes`` (a dataflow's) read: its declared
    key, and of each node reading it the columns a projection names; any other
    reader reads them all. A column none reads may change or go under the source
    without changing what any node computes."""
    read = set() if source.key == tuple(source.columns) else set(source.key)
    for node in nodes:
        if all(i.id != source.id for i in node.inputs):
            continue
        passed = passed_through(node) if isinstance(node, n.Select) else {}
        if not isinstance(node, n.Select) or len(passed) < len(node.exprs) + len(node.named):
            return frozenset(source.columns)
        read |= set(passed.values())
    return frozenset(read)


def keyed_leaves(node: n.Node, key: Sequence[str]) -> list[n.Node] | None:
    """The traces ``node`` is a linear function of, when every one is keyed by the
    columns ``key`` names and every operator in between passes them through, as
    they are or renamed (``node`` itself, when its own trace is keyed by ``key``);
    None otherwise. ``node``'s history for some keys is then that function of
    theirs (the keys renamed as the columns are), and the keys its changes touch
    are those theirs touch: hashed alike, for a rename keeps a column's type."""
    if keyed_by(node, key):
        return [node]
    if node.trace_name is not None or not node.inputs:
        return None
    if isinstance(node, n.Select):
        passed = passed_through(node)
        if any(k not in passed for k in key):
            return None
        key = [passed[k] for k in key]
    elif not isinstance(node, n.Filter | n.Concat | n.Negate | n.Consolidate):
        return None
    leaves: dict[str, n.Node] = {}
    for i in node.inputs:
        found = keyed_leaves(i, key)
        if found is None:
            return None
        leaves |= {x.id: x for x in found}
    return list(leaves.values())
