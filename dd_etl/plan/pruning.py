"""Columns pruned before arrangements: an arrangement keeps what its readers read.

A collection built in Python carries every column of its sources to every
operator: ``trips.join(zones, left_on=["pickup_zone"], ...)`` arranges all the
trips' columns by zone, though the view over the join reads two of them. An
arrangement stores what it is given, so each column no reader reads would be
shuffled, sorted and written at every epoch, and kept. Spark prunes such
columns inside one query; a trace is written between queries, so the plan
prunes them itself when a view is defined (``narrowed``):

1. from the view down, the columns each node's users read of it
   (``read_of_inputs``): a view reads all of its columns, a projection those its
   expressions name, a join its keys and the columns of its output that are
   read, an arrangement its key and what is read of it;
2. each arrangement whose input has columns nobody reads is made over a
   projection of that input to the read ones, and the nodes between it and the
   view are made again over their narrower inputs (new ids, so new traces).

Per view, never across views: a view's plan depends on its own definition, so
defining another view never changes it; views that read the same columns of an
arrangement share it still (ids are structural). A node whose columns cannot be
told (an expression given as a PySpark column, a generator, a general
reduction, a delta query) reads all of its inputs' columns, and loops are left
as they are (their bodies' traces are product-time ones), along with all they
read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import lru_cache

from pyspark.sql import Column
from pyspark.sql.types import StructType

from dd_etl.operators.linear import Expr
from dd_etl.plan import nodes as n
from dd_etl.plan.fingerprint import node_id

Project = Callable[[n.Node, Sequence[str]], n.Node]
"""Makes the projection of a node to some of its columns."""
Arrange = Callable[[n.Node, tuple[str, ...]], n.Arrange]
"""Makes (or finds) the arrangement of a node by a key."""

Names = frozenset[str]
"""Column names, lower-cased: Spark resolves them without regard to case."""

PASSING = (n.Filter, n.Negate, n.Consolidate, n.Concat, n.Arrange)
"""Operators whose output columns are their input's: narrower in, narrower out."""


def narrowed(root: n.Node, project: Project, arrange: Arrange) -> n.Node:
    """``root`` (all of whose columns a view keeps), its arrangements holding only
    the columns read of them; ``root`` itself when none holds more. New
    projections and arrangements are made by ``project`` and ``arrange``."""
    frozen = _loops_and_their_inputs(root)
    order = _users_first(root, frozen)
    if not any(isinstance(x, n.Arrange) for x in order):
        return root
    read: dict[str, set[str]] = {root.id: set(_lower(root.columns))}
    for x in order:
        for i, names in zip(x.inputs, read_of_inputs(x, frozenset(read[x.id])), strict=True):
            read.setdefault(i.id, set()).update(names)
    made: dict[str, n.Node] = {}
    for x in reversed(order):  # inputs before their users
        if x.id in frozen:
            continue
        inputs = tuple(made.get(i.id, i) for i in x.inputs)
        if isinstance(x, n.Arrange):
            made[x.id] = _arranged(
                project, arrange, x, inputs[0], frozenset(read[x.id]) | _lower(x.key)
            )
        elif any(a is not b for a, b in zip(inputs, x.inputs, strict=True)):
            made[x.id] = _again(project, x, inputs, frozenset(read[x.id]))
    return made.get(root.id, root)


def read_of_inputs(node: n.Node, read: Names) -> list[Names]:
    """The columns of each input of ``node`` that it reads to make the columns
    ``read`` of its output (lower-cased)."""
    everything = [_lower(i.columns) for i in node.inputs]
    match node:
        case n.Select():
            exprs = [*node.exprs, *(e for _, e in node.named)]
            computing = [exprs[i] for i in _computing(node, read)]
            return [named_in(computing, node.inputs[0].columns)]
        case n.Filter(predicate=predicate):
            return [named_in([predicate], node.inputs[0].columns) | read]
        case n.Arrange(key=key):
            return [read | _lower(key)]
        case n.Negate() | n.Consolidate() | n.Concat():
            return [read & cols for cols in everything]
        case n.Join(left_key=lk, right_key=rk, right_columns=right_columns):
            right = read & _lower(right_columns)
            return [(read & everything[0]) | _lower(lk), right | _lower(rk)]
        case n.Accumulate(key=key, values=values):
            return [_lower([*key, *values])]
        case n.Reduce(kind="count", key=key):
            return [_lower(key)]
        case n.Reduce(kind="min" | "max", key=key, column=column):
            return [_lower([*key, column])]
    return everything


def named_in(exprs: Iterable[Expr], columns: Sequence[str]) -> Names:
    """The ``columns`` that ``exprs`` name (lower-cased): those whose name appears
    in an expression's text as a whole word, or all of them where an expression
    may be a star. A PySpark column counts by its text as Spark prints it, which
    names every column it reads. Never fewer than are read; more where a name is
    also a function's, a struct field's or a lambda variable's."""
    texts = [_text(e) for e in exprs]
    if any(_may_be_star(t) for t in texts):
        return _lower(columns)
    return frozenset(c.lower() for c in columns if any(_names(c, t) for t in texts))


def _text(e: Expr) -> str:
    text = str(e)
    if isinstance(e, Column) and text.startswith("Column<'") and text.endswith("'>"):
        return text[len("Column<'") : -2]
    return text


_STAR = re.compile(r"(?:^|[(,.\s])\*(?=\s*(?:$|[),.]|except\b|replace\b))", re.IGNORECASE)
"""A star: ``*``, ``t.*``, ``count(*)``, not a product (``a * b``, or ``*(a, b)`` as
Spark prints one)."""


def _may_be_star(text: str) -> bool:
    return _STAR.search(text) is not None


def _names(column: str, text: str) -> bool:
    if _WORD.fullmatch(column):
        return column.lower() in _words(text)
    return re.search(rf"(?<![\w$]){re.escape(column)}(?![\w$])", text, re.IGNORECASE) is not None


_WORD = re.compile(r"[\w$]+")


@lru_cache(maxsize=16384)
def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def _arranged(
    project: Project, arrange: Arrange, node: n.Arrange, given: n.Node, read: Names
) -> n.Node:
    """``node`` over ``given``, projected to the columns ``read`` of it first."""
    kept = [c for c in given.columns if c.lower() in read]
    if kept and len(kept) < len(given.columns):  # an arrangement by no key may read none
        given = project(given, kept)
    return node if given is node.inputs[0] else arrange(given, node.key)


def _again(project: Project, node: n.Node, inputs: tuple[n.Node, ...], read: Names) -> n.Node:
    """``node`` made over ``inputs``, narrower than its own (or over narrower
    ones), for its columns ``read``: its output narrows as theirs where it
    passes their columns on, a projection's to the columns read."""
    params: dict[str, object] = {}
    schema = node.schema
    if isinstance(node, n.Select):
        kept = _computing(node, read)
        params["exprs"] = tuple(e for i, e in enumerate(node.exprs) if i in kept)
        params["named"] = tuple(p for i, p in enumerate(node.named, len(node.exprs)) if i in kept)
        if len(kept) < len(node.columns):
            schema = _only(node.schema, [node.columns[i] for i in kept])
    if isinstance(node, n.Concat):
        shared = [c for c in inputs[0].columns if all(c in i.columns for i in inputs)]
        inputs = tuple(i if i.columns == shared else project(i, shared) for i in inputs)
    if isinstance(node, PASSING):
        schema = _only(node.schema, inputs[0].columns)
    elif isinstance(node, n.Join):
        right_columns = tuple(c for c in node.right_columns if c in inputs[1].columns)
        schema = _only(node.schema, [*inputs[0].columns, *right_columns])
        params["right_columns"] = right_columns
    operator = node.id.rsplit("_", 1)[0]
    ids = tuple(i.id for i in inputs)
    made = node_id(operator, ids, schema, narrowed_from=node.id)
    return replace(node, id=made, inputs=inputs, schema=schema, **params)


def _computing(node: n.Select, read: Names) -> list[int]:
    """Which expressions of ``node`` (positional ones first, then named ones)
    compute the columns ``read`` of it: all when none is read (no collection is
    left without columns), or when they are not one per column (a star)."""
    count = len(node.exprs) + len(node.named)
    kept = [i for i, c in enumerate(node.columns) if c.lower() in read]
    return kept if count == len(node.columns) and kept else list(range(count))


def _only(schema: StructType, columns: Sequence[str]) -> StructType:
    return StructType([schema[c] for c in columns])


def _users_first(root: n.Node, frozen: set[str]) -> list[n.Node]:
    """The nodes ``root`` reads up to (not into) the traces of sources, views and
    loops, each once, every node before the nodes it reads."""
    seen: set[str] = set()
    after: list[n.Node] = []

    def visit(x: n.Node) -> None:
        if x.id in seen:
            return
        seen.add(x.id)
        if x.id not in frozen and not isinstance(x, n.Source | n.View):
            for i in x.inputs:
                visit(i)
        after.append(x)

    visit(root)
    return after[::-1]


def _loops_and_their_inputs(root: n.Node) -> set[str]:
    """The ids of the loops ``root`` reads and of every node they read."""
    frozen: set[str] = set()

    def reads(x: n.Node) -> None:
        if x.id not in frozen:
            frozen.add(x.id)
            for i in x.inputs:
                reads(i)

    def visit(x: n.Node, seen: set[str]) -> None:
        if x.id in seen:
            return
        seen.add(x.id)
        if isinstance(x, n.Iterate):
            reads(x)
        elif not isinstance(x, n.View):
            for i in x.inputs:
                visit(i, seen)

    visit(root, set())
    return frozen


def _lower(columns: Iterable[str]) -> Names:
    return frozenset(c.lower() for c in columns)
