"""The operators of a dataflow graph, as plain data.

A node names its operator, its parameters and its inputs; the runtime decides
how to compute its changes. Nodes that keep history (sources, arrangements,
reductions, views) own a trace named by the node's ``trace_name``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pyspark.sql.types import StructType

from dd_etl.operators.delta_query import Lookup
from dd_etl.operators.linear import Expr
from dd_etl.operators.reduce import Numbering

ReduceKind = Literal[
    "distinct",
    "count",
    "min",
    "max",
    "min_max",
    "top_k",
    "threshold",
    "collapse",
    "general",
    "accumulate",
    "window",
    "running",
    "aggregate",
]


@dataclass(frozen=True, eq=False)
class Node:
    id: str
    inputs: tuple[Node, ...]
    schema: StructType = field(repr=False)

    @property
    def columns(self) -> list[str]:
        return self.schema.fieldNames()

    @property
    def trace_name(self) -> str | None:
        """Relative location of the node's trace under the warehouse, if it keeps one."""
        return None


@dataclass(frozen=True, eq=False, kw_only=True)
class Source(Node):
    name: str
    key: tuple[str, ...]

    @property
    def trace_name(self) -> str:
        return f"sources/{self.name}"


@dataclass(frozen=True, eq=False, kw_only=True)
class Constant(Node):
    """Fixed rows, present from epoch 0 on (SQL ``VALUES``, defaults of global aggregates)."""

    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class Select(Node):
    exprs: tuple[Expr, ...] = ()
    named: tuple[tuple[str, Expr], ...] = ()


@dataclass(frozen=True, eq=False, kw_only=True)
class Filter(Node):
    predicate: Expr


@dataclass(frozen=True, eq=False, kw_only=True)
class Explode(Node):
    """A generator (``explode``, ``posexplode``, ``inline``, their ``_outer``
    forms, ``stack``…) on each row: one output row per generated row, the
    input's columns, then ``names``."""

    generator: Expr
    names: tuple[str, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class Concat(Node):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Negate(Node):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Consolidate(Node):
    pass


@dataclass(frozen=True, eq=False, kw_only=True)
class Arrange(Node):
    """The input's updates indexed by ``key``: a trace shared by every operator
    (in any view of the dataflow) that needs the same collection by the same key."""

    key: tuple[str, ...]

    @property
    def trace_name(self) -> str:
        return f"arrangements/{self.id}"


@dataclass(frozen=True, eq=False, kw_only=True)
class Join(Node):
    """Inner equi-join of two arrangements; SQL semantics: NULL keys never match."""

    left_key: tuple[str, ...]
    right_key: tuple[str, ...]
    right_columns: tuple[str, ...]  # columns of the right side kept in the output
    null_safe: bool = False  # NULL keys match each other (grouping keys, not SQL join keys)


@dataclass(frozen=True, eq=False, kw_only=True)
class DeltaQuery(Node):
    """Inner join of several relations (SQL ``USING`` on shared column names) as a
    delta query. ``inputs`` are arrangements of the relations, one per distinct
    lookup; ``lookups[j]`` names the relation and key input ``j`` arranges. A
    relation's changes are read from any of its arrangements."""

    orders: tuple[tuple[Lookup, ...], ...]
    lookups: tuple[Lookup, ...]


@dataclass(frozen=True, eq=False, kw_only=True)
class Reduce(Node):
    """Per-key reduction of an arrangement; its output is kept as a trace by key.

    Its value is a function of ``inputs[0]`` alone. A ``running`` window has two
    more inputs, per key its last row's order and its totals, which only the
    rule computing its changes reads (``operators/running.py``)."""

    key: tuple[str, ...]
    kind: ReduceKind
    column: str = "count"  # the counted column's name, or the value min/max reduce
    order: tuple[tuple[str, bool], ...] = ()  # top_k: (column, descending)
    limit: int = 0  # top_k: rows kept per key
    numbering: Numbering = "row_number"  # top_k: how rows are counted to the limit
    multiplicity: str = ""  # threshold: SQL expression of `_diff`, the row's count
    function: Callable[[Any], Any] | None = None  # general: pandas group -> pandas rows
    values: tuple[str, ...] = ()  # accumulate: the columns counted and summed
    calls: tuple[tuple[str, str], ...] = ()  # window, running, aggregate: (column, call)

    @property
    def trace_name(self) -> str:
        return f"reductions/{self.id}"


@dataclass(frozen=True, eq=False, kw_only=True)
class Accumulate(Node):
    """In-place sums per key (SQL COUNT/SUM/AVG): the output is the running
    ``(rows, non-NULL count, sum)`` of each value column, never re-reading the input."""

    key: tuple[str, ...]
    values: tuple[str, ...]

    @property
    def trace_name(self) -> str:
        return f"reductions/{self.id}"


@dataclass(frozen=True, eq=False, kw_only=True)
class View(Node):
    name: str

    @property
    def plan(self) -> str:
        """The structural id of the view's definition: it changes when the definition does."""
        return self.inputs[0].id

    @property
    def trace_name(self) -> str:
        return f"views/{self.name}"


@dataclass(frozen=True, eq=False, kw_only=True)
class Variable(Node):
    """The loop variable of an ``Iterate``: at iteration 0 the loop's initial
    collection, at iteration ``i + 1`` the body's result at iteration ``i``."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Iterate(Node):
    """A fixed point: ``variable`` fed back from ``result`` until nothing changes.

    ``inputs`` are the collections from outside the loop the body reads (its
    first is the initial collection); they enter the loop at iteration 0. The
    nodes between ``variable`` and ``result`` run with times ``(epoch,
    iteration)`` (one more iteration per enclosing loop, if this one is nested);
    the result leaves the loop as the fixed point at each epoch.
    """

    variable: Variable
    result: Node
    limit: int  # iterations an epoch may take before the loop counts as diverging

    @property
    def trace_name(self) -> str:
        return f"iterations/{self.id}/result"

    def inner_trace_name(self, node: Node) -> str:
        """Where a node of the body keeps its product-time history."""
        return f"iterations/{self.id}/{node.id}"
