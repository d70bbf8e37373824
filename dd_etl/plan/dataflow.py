"""The Python collection API: build a dataflow of differential operators.

    flow = Dataflow(spark, "traces/taxi")
    trips = flow.source("trips", schema, key=["trip_id"])
    busy = trips.filter("passenger_count > 2").select("passenger_count", "fare_amount")
    flow.view("busy_fares", busy.count(["passenger_count"]))

Operators take Spark column expressions or SQL expression strings, so all the
work stays inside Spark. Building a collection only records a node and infers
its schema; ``Runtime`` (``dd_etl.runtime``) computes the changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.operators import linear
from dd_etl.operators.linear import Expr
from dd_etl.plan import nodes as n
from dd_etl.trace.columns import DIFF, TIME


class PlanError(ValueError):
    """A dataflow that cannot be built: names the operator and what is wrong."""


class Dataflow:
    def __init__(self, spark: SparkSession, warehouse: str | Path, name: str = "dataflow") -> None:
        self.spark = spark
        self.warehouse = Path(warehouse)
        self.name = name
        self.sources: dict[str, n.Source] = {}
        self.views: dict[str, n.View] = {}
        self._arrangements: dict[tuple[str, tuple[str, ...]], n.Arrange] = {}
        self._counter = 0

    def _id(self, kind: str) -> str:
        self._counter += 1
        return f"{self._counter:03d}_{kind}"

    def source(self, name: str, schema: StructType, key: Sequence[str] | None = None) -> Collection:
        if name in self.sources:
            raise PlanError(f"source {name!r} is defined twice")
        key = tuple(key or schema.fieldNames())
        unknown = [k for k in key if k not in schema.fieldNames()]
        if unknown:
            raise PlanError(f"source {name!r}: key columns {unknown} are not in its schema")
        node = n.Source(self._id("source"), (), schema, name=name, key=key)
        self.sources[name] = node
        return Collection(self, node)

    def view(self, name: str, collection: Collection) -> Collection:
        if name in self.views:
            raise PlanError(f"view {name!r} is defined twice")
        node = n.View(self._id("view"), (collection.node,), collection.node.schema, name=name)
        self.views[name] = node
        return Collection(self, node)

    def arrangement(self, node: n.Node, key: tuple[str, ...]) -> n.Arrange:
        """The arrangement of ``node`` by ``key``, created once and shared."""
        missing = [k for k in key if k not in node.columns]
        if missing:
            raise PlanError(f"cannot arrange by {missing}: columns are {node.columns}")
        cache_key = (node.id, key)
        if cache_key not in self._arrangements:
            self._arrangements[cache_key] = n.Arrange(
                self._id("arrange"), (node,), node.schema, key=key
            )
        return self._arrangements[cache_key]

    def empty_updates(self, schema: StructType) -> DataFrame:
        fields = [*schema.fields, StructField(TIME, LongType()), StructField(DIFF, LongType())]
        return self.spark.createDataFrame([], StructType(fields))

    def infer(self, inputs: Sequence[n.Node], build: object) -> StructType:
        """The data schema of an operator, found by applying it to empty inputs."""
        frames = [self.empty_updates(i.schema) for i in inputs]
        out: DataFrame = build(*frames)  # type: ignore[operator]
        data = linear.data_columns(out)
        return StructType([out.schema[c] for c in data])


class Collection:
    """A collection of the dataflow: every method returns a new collection."""

    def __init__(self, flow: Dataflow, node: n.Node) -> None:
        self.flow = flow
        self.node = node

    @property
    def columns(self) -> list[str]:
        return self.node.columns

    def _linear(
        self, cls: type[n.Node], build: object, *others: Collection, **params: object
    ) -> Collection:
        inputs = (self.node, *(o.node for o in others))
        try:
            schema = self.flow.infer(inputs, build)
        except Exception as e:  # Spark's analysis errors name the column and position
            raise PlanError(f"{cls.__name__.lower()}: {e}") from e
        node = cls(self.flow._id(cls.__name__.lower()), inputs, schema, **params)
        return Collection(self.flow, node)

    # ------------------------------------------------------------------ linear

    def select(self, *exprs: Expr, **named: Expr) -> Collection:
        """Project or compute columns (``map``): ``select("a", F.col("b") * 2, c="a + b")``."""
        return self._linear(
            n.Select,
            lambda df: linear.select(df, exprs, named),
            exprs=tuple(exprs),
            named=tuple(named.items()),
        )

    map = select

    def filter(self, predicate: Expr) -> Collection:
        return self._linear(n.Filter, lambda df: linear.filter_(df, predicate), predicate=predicate)

    def explode(self, column: Expr, alias: str) -> Collection:
        """``flat_map``: one output row per element of an array or map column."""
        keep = [c for c in self.columns if c != alias]
        return self._linear(
            n.Explode,
            lambda df: linear.explode(df, column, alias, keep),
            column=column,
            alias=alias,
        )

    flat_map = explode

    def concat(self, *others: Collection) -> Collection:
        for o in others:
            if o.columns != self.columns:
                raise PlanError(f"concat: columns {o.columns} differ from {self.columns}")
        return self._linear(n.Concat, lambda *dfs: linear.concat(dfs), *others)

    def negate(self) -> Collection:
        return self._linear(n.Negate, linear.negate)

    def consolidate(self) -> Collection:
        return self._linear(n.Consolidate, linear.consolidate)

    # ----------------------------------------------------------- stateful

    def arrange_by(self, *key: str) -> Collection:
        return Collection(self.flow, self.flow.arrangement(self.node, tuple(key)))

    def join(
        self,
        other: Collection,
        on: Sequence[str] | str | None = None,
        *,
        left_on: Sequence[str] | None = None,
        right_on: Sequence[str] | None = None,
    ) -> Collection:
        """Inner equi-join. With ``on`` the key columns appear once in the output."""
        if on is not None:
            lk = rk = (on,) if isinstance(on, str) else tuple(on)
            right_columns = tuple(c for c in other.columns if c not in rk)
        elif left_on is not None and right_on is not None:
            lk, rk = tuple(left_on), tuple(right_on)
            right_columns = tuple(other.columns)
        else:
            raise PlanError("join: give `on`, or both `left_on` and `right_on`")
        if len(lk) != len(rk):
            raise PlanError(f"join: {len(lk)} left key columns but {len(rk)} right ones")
        clash = set(self.columns) & set(right_columns)
        if clash:
            raise PlanError(f"join: both sides have columns {sorted(clash)}; rename one side first")
        left = self.flow.arrangement(self.node, lk)
        right = self.flow.arrangement(other.node, rk)
        fields = [*self.node.schema.fields, *(other.node.schema[c] for c in right_columns)]
        node = n.Join(
            self.flow._id("join"),
            (left, right),
            StructType(fields),
            left_key=lk,
            right_key=rk,
            right_columns=right_columns,
        )
        return Collection(self.flow, node)

    def semijoin(self, other: Collection, on: Sequence[str] | str) -> Collection:
        """Rows of ``self`` whose key occurs in ``other`` (SQL ``EXISTS``/``IN``),
        with their own multiplicity."""
        keys = (on,) if isinstance(on, str) else tuple(on)
        present = other.select(*keys).distinct()
        renamed = present.select(**{f"__k{i}": k for i, k in enumerate(keys)})
        joined = self.join(renamed, left_on=keys, right_on=[f"__k{i}" for i in range(len(keys))])
        return joined.select(*self.columns)

    def antijoin(self, other: Collection, on: Sequence[str] | str) -> Collection:
        """Rows of ``self`` whose key does not occur in ``other``."""
        return self.concat(self.semijoin(other, on).negate())

    def _reduce(
        self, key: tuple[str, ...], kind: n.ReduceKind, schema: StructType, **params: object
    ) -> Collection:
        arranged = self.flow.arrangement(self.node, key)
        node = n.Reduce(self.flow._id(kind), (arranged,), schema, key=key, kind=kind, **params)  # type: ignore[arg-type]
        return Collection(self.flow, node)

    def distinct(self) -> Collection:
        """Each distinct row once (set semantics)."""
        return self._reduce(tuple(self.columns), "distinct", self.node.schema)

    def count(self, key: Sequence[str] = (), name: str = "count") -> Collection:
        """Rows per key: one output row ``(key..., count)`` per key present."""
        key = tuple(key)
        fields = [self.node.schema[k] for k in key] + [StructField(name, LongType(), False)]
        return self._reduce(key, "count", StructType(fields), count_column=name)
