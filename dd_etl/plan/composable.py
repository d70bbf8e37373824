"""The collection operators a builder beneath ``Collection`` composes.

``Collection.aggregate`` hands the work to ``aggregates.build_aggregate``, which
lays a GROUP BY out as other operators of the collection. The builder is typed
against this description of them, which ``Collection`` and ``Dataflow`` meet as
they are, so the collection API imports its builders and not the reverse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, Self, TypeVar

from pyspark.sql.types import StructType

from dd_etl.operators.linear import Expr
from dd_etl.operators.reduce import Reducer
from dd_etl.plan import nodes as n

C_co = TypeVar("C_co", covariant=True)


class ComposableFlow(Protocol[C_co]):
    """The dataflow a composable collection belongs to."""

    def constant(self, rows: Sequence[Sequence[Any]], schema: StructType) -> C_co: ...

    def reduced_schema(
        self,
        node: n.Node,
        key: tuple[str, ...],
        reducer: Reducer,
        what: str,
        calls: tuple[tuple[str, str], ...],
    ) -> StructType: ...


class Composable(Protocol):
    """A collection, as far as a builder beneath it uses one."""

    @property
    def flow(self) -> ComposableFlow[Self]: ...

    @property
    def node(self) -> n.Node: ...

    @property
    def columns(self) -> list[str]: ...

    def select(self, *exprs: Expr, **named: Expr) -> Self: ...

    def concat(self, *others: Self) -> Self: ...

    def negate(self) -> Self: ...

    def distinct(self) -> Self: ...

    def accumulate(self, key: Sequence[str], values: Sequence[str]) -> Self: ...

    def extremes(self, key: Sequence[str], value: str) -> Self: ...

    def _reduce(
        self, key: tuple[str, ...], kind: n.ReduceKind, schema: StructType, **params: Any
    ) -> Self: ...
