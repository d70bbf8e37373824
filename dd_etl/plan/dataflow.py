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

from collections.abc import Callable, Sequence
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, MapType, StructField, StructType

from dd_etl.errors import NotDeterministic, first_line
from dd_etl.errors import PlanError as PlanError
from dd_etl.lake import Where, as_location
from dd_etl.local_relations import empty_frame
from dd_etl.operators import linear
from dd_etl.operators.accumulate import contributions
from dd_etl.operators.delta_query import lookup_orders
from dd_etl.operators.extremes import order_struct, packed
from dd_etl.operators.linear import Expr
from dd_etl.operators.reduce import AT, HIGH, LOW, Numbering, Reducer
from dd_etl.operators.running import running_calls
from dd_etl.operators.window import window
from dd_etl.plan import nodes as n
from dd_etl.plan.aggregates import Aggregate, build_aggregate
from dd_etl.plan.column_names import (
    cast_literal,
    column,
    hash_bucket,
    is_not_null,
    renamed,
    shifted_right,
)
from dd_etl.plan.fingerprint import function_id, node_id
from dd_etl.plan.graph import keyed_leaves
from dd_etl.plan.inferred import InferredSchemas
from dd_etl.plan.iteration import DEFAULT_ITERATION_LIMIT, build_iterate
from dd_etl.plan.loops import reads_loop_variable
from dd_etl.plan.pruning import narrowed
from dd_etl.plan.refresh import RefreshPolicy
from dd_etl.spark_driver import driver_for
from dd_etl.sql_text import quote
from dd_etl.trace.columns import DIFF, TIME

JoinHow = Literal["inner", "left", "right", "full"]
HIERARCHY_SHIFTS = (24,)
"""Bucket hashes are 32 bits; the levels of a MIN/MAX group by their top 8 bits
(256 buckets per key), then by the key alone (each entry is a further shift).
One level keeps what a retraction reads to a 256th of its group below the top,
and at most 256 rows per key at the top, for groups up to millions of rows; a
second level (by the top 16 bits first) would cost two more traces in every
epoch and, for groups of thousands, hold as many rows as its input."""


class Dataflow:
    def __init__(
        self,
        spark: SparkSession,
        warehouse: Where,
        name: str = "dataflow",
        schemas: InferredSchemas | None = None,
    ) -> None:
        self.spark = spark
        self.warehouse = as_location(warehouse)
        self.name = name
        self.sources: dict[str, n.Source] = {}
        self.views: dict[str, n.View] = {}
        self.refresh: dict[str, RefreshPolicy] = {}
        """Views not maintained incrementally only (not part of any plan id: changing
        a view's policy needs no rebuild)."""
        self._arrangements: dict[tuple[str, tuple[str, ...]], n.Arrange] = {}
        self._empty: dict[str, DataFrame] = {}
        self.schemas = schemas or InferredSchemas()
        """Operator schemas Spark gave before, by what decides them."""

    def source(self, name: str, schema: StructType, key: Sequence[str] | None = None) -> Collection:
        if name in self.sources:
            raise PlanError(f"source {name!r} is defined twice")
        key = tuple(key or schema.fieldNames())
        unknown = [k for k in key if k not in schema.fieldNames()]
        if unknown:
            raise PlanError(f"source {name!r}: key columns {unknown} are not in its schema")
        node = n.Source(f"source_{name}", (), schema, name=name, key=key)
        self.sources[name] = node
        return Collection(self, node)

    def constant(self, rows: Sequence[Sequence[Any]], schema: StructType) -> Collection:
        """A collection holding ``rows`` (each once) from epoch 0 on."""
        fixed = tuple(tuple(r) for r in rows)
        width = len(schema.fields)
        if any(len(r) != width for r in fixed):
            raise PlanError(f"constant: every row needs {width} values for {schema.fieldNames()}")
        node = n.Constant(node_id("constant", (), schema, rows=fixed), (), schema, rows=fixed)
        return Collection(self, node)

    def constant_updates(self, node: n.Constant) -> DataFrame:
        """The rows of ``node`` as updates at epoch 0."""
        rows = self.spark.createDataFrame(list(node.rows), node.schema)
        return rows.withColumn(TIME, F.lit(0).cast("long")).withColumn(DIFF, F.lit(1).cast("long"))

    def view(
        self, name: str, collection: Collection, refresh: RefreshPolicy | None = None
    ) -> Collection:
        if name in self.views:
            raise PlanError(f"view {name!r} is defined twice")
        # Structural like every id, so what reads a view changes when its definition does.
        root = narrowed(collection.node, self._projection, self.arrangement)
        view_id = node_id("view", (root.id,), root.schema, name=name)
        node = n.View(view_id, (root,), root.schema, name=name)
        self.views[name] = node
        if refresh is not None:
            self.refresh[name] = refresh
        return Collection(self, node)

    def _projection(self, node: n.Node, columns: Sequence[str]) -> n.Node:
        return Collection(self, node).select(*columns).node

    def refresh_policy(self, view: str) -> RefreshPolicy:
        return self.refresh.get(view, RefreshPolicy())

    def arrangement(self, node: n.Node, key: tuple[str, ...]) -> n.Arrange:
        """The arrangement of ``node`` by ``key``, created once and shared."""
        missing = [k for k in key if k not in node.columns]
        if missing:
            raise PlanError(f"cannot arrange by {missing}: columns are {node.columns}")
        cache_key = (node.id, key)
        if cache_key not in self._arrangements:
            self._arrangements[cache_key] = n.Arrange(
                node_id("arrange", (node.id,), node.schema, key=key), (node,), node.schema, key=key
            )
        return self._arrangements[cache_key]

    def keyed(self, node: n.Node, key: tuple[str, ...], in_loop: bool) -> n.Node:
        """``node`` as an operator looking it up by ``key`` reads it: ``node`` itself
        when it is a linear function of traces all keyed by those columns
        (``keyed_leaves``), its history then read through theirs and a trace
        saved; else, and in a loop (whose rounds read traces of their own), its
        arrangement by ``key``."""
        if not in_loop and keyed_leaves(node, key) is not None:
            return node
        return self.arrangement(node, key)

    def empty_updates(self, schema: StructType) -> DataFrame:
        """No updates of ``schema``; made once per schema, as building a collection
        infers each operator's schema from empty inputs. Spark knows it is empty
        (``local_relations``), so what it feeds is pruned from every plan."""
        cached = self._empty.get(schema.json())
        if cached is None:
            fields = [*schema.fields, StructField(TIME, LongType()), StructField(DIFF, LongType())]
            cached = empty_frame(self.spark, StructType(fields))
            self._empty[schema.json()] = cached
        return cached

    def infer(self, inputs: Sequence[n.Node], build: object, decided_by: object) -> StructType:
        """The data schema of an operator, found by applying it to empty inputs,
        unless Spark gave it before for the same ``decided_by`` (the operator's kind
        and parameters: what ``build`` does) and inputs."""
        key = self.schemas.key(decided_by, inputs)
        known = self.schemas.get(key)
        if known is not None:
            return known
        frames = [self.empty_updates(i.schema) for i in inputs]
        out: DataFrame = build(*frames)  # type: ignore[operator]
        if not driver_for(self.spark).deterministic(out):
            raise NotDeterministic(
                "not deterministic (Spark says so of a function it calls): a re-run would "
                "compute other rows than those retracted later"
            )
        data = linear.data_columns(out)
        schema = StructType([out.schema[c] for c in data])
        self.schemas.put(key, schema)
        return schema

    def reduced_schema(
        self,
        node: n.Node,
        key: tuple[str, ...],
        reducer: Reducer,
        what: str,
        calls: tuple[tuple[str, str], ...],
    ) -> StructType:
        """The data schema of a reduction of ``node`` by ``key``, from Spark's
        analysis of ``reducer`` (``what`` of ``calls``) on no rows, which also
        refuses calls it cannot evaluate, naming them."""

        def build(df: DataFrame) -> DataFrame:
            return reducer(df.withColumnRenamed(TIME, AT), key).withColumnRenamed(AT, TIME)

        try:
            return self.infer([node], build, (what, key, calls))
        except NotDeterministic:
            raise
        except Exception as e:  # Spark's analysis names the call and the column
            raise PlanError(f"{what}: {first_line(e)}") from e


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
            schema = self.flow.infer(inputs, build, (cls.__name__, params))
        except NotDeterministic:
            raise
        except Exception as e:  # Spark's analysis errors name the column and position
            raise PlanError(f"{cls.__name__.lower()}: {e}") from e
        ids = tuple(i.id for i in inputs)
        node = cls(node_id(cls.__name__.lower(), ids, schema, **params), inputs, schema, **params)
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
        generator = f"explode({column})" if isinstance(column, str) else F.explode(column)
        return self.generate(generator, alias)

    def generate(self, generator: Expr, *names: str) -> Collection:
        """A Spark generator on each row, its outputs as columns ``names``:
        ``generate("posexplode_outer(items)", "pos", "item")``. Linear: each row's
        change is its generated rows' change."""
        keep = [c for c in self.columns if c not in names]
        return self._linear(
            n.Explode,
            lambda df: linear.explode(df, generator, names, keep),
            generator=generator,
            names=tuple(names),
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
        how: JoinHow = "inner",
        null_safe: bool = False,
    ) -> Collection:
        """Equi-join. With ``on`` the key columns appear once in the output.

        ``how``: inner, left, right or full outer (unmatched rows padded with
        NULLs). SQL semantics: NULL keys never match, unless ``null_safe``.
        """
        lk, rk, right_columns = self._join_keys(other, on, left_on, right_on)
        if how == "inner":
            return self._inner_join(other, lk, rk, right_columns, null_safe)
        if how not in ("left", "right", "full"):
            raise PlanError(f"join: unknown join type {how!r}")
        inner = self._inner_join(other, lk, rk, right_columns, null_safe)
        parts = [inner]
        if how in ("left", "full"):
            lonely = self.antijoin(other, left_on=lk, right_on=rk, null_safe=null_safe)
            parts.append(lonely._padded(inner.node.schema))
        if how in ("right", "full"):
            lonely = other.antijoin(self, left_on=rk, right_on=lk, null_safe=null_safe)
            if on is not None:  # the shared key columns come from whichever side matched
                lonely = lonely.select(*lonely.columns)
            parts.append(lonely._padded(inner.node.schema))
        return parts[0].concat(*parts[1:])

    def _join_keys(
        self,
        other: Collection,
        on: Sequence[str] | str | None,
        left_on: Sequence[str] | None,
        right_on: Sequence[str] | None,
    ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
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
        return lk, rk, right_columns

    def _inner_join(
        self,
        other: Collection,
        lk: tuple[str, ...],
        rk: tuple[str, ...],
        right_columns: tuple[str, ...],
        null_safe: bool,
    ) -> Collection:
        in_loop = reads_loop_variable(self.node) or reads_loop_variable(other.node)
        left = self.flow.keyed(self.node, lk, in_loop)
        right = self.flow.keyed(other.node, rk, in_loop)
        fields = [*self.node.schema.fields, *(other.node.schema[c] for c in right_columns)]
        schema = StructType(fields)
        params: dict[str, Any] = dict(
            left_key=lk, right_key=rk, right_columns=right_columns, null_safe=null_safe
        )
        node = n.Join(
            node_id("join", (left.id, right.id), schema, **params), (left, right), schema, **params
        )
        return Collection(self.flow, node)

    def _padded(self, schema: StructType) -> Collection:
        """This collection with NULLs for the columns of ``schema`` it lacks, in its order."""
        cols = [
            column(f.name) if f.name in self.columns else cast_literal(None, f.dataType, f.name)
            for f in schema.fields
        ]
        return self.select(*cols)

    def join_all(self, *others: Collection) -> Collection:
        """Inner join with every one of ``others`` on the column names they share
        (SQL ``NATURAL JOIN``), maintained as a delta query: each relation's changes
        look the others up in arrangements of the inputs, so no intermediate
        result is stored, unlike a chain of binary joins. Inside a loop body it
        is such a chain (in the same order)."""
        relations = [self, *others]
        columns = [r.columns for r in relations]
        try:
            orders = lookup_orders(columns)
        except ValueError as e:
            raise PlanError(f"join_all: {e}; columns are {columns}") from e
        output = list(dict.fromkeys(c for cols in columns for c in cols))
        if any(reads_loop_variable(r.node) for r in relations):
            # Delta queries read their inputs' history at one time; inside a loop
            # the binary joins, whose rules know product times, do the work.
            joined = self
            for lookup in orders[0]:
                joined = joined.join(relations[lookup.relation], on=list(lookup.key))
            return joined.select(*output)
        lookups = tuple(dict.fromkeys(step for order in orders for step in order))
        inputs = tuple(
            self.flow.keyed(relations[lk.relation].node, lk.key, False) for lk in lookups
        )
        schema = StructType(
            [next(r.node.schema[c] for r in relations if c in r.columns) for c in output]
        )
        params: dict[str, Any] = dict(orders=orders, lookups=lookups)
        node = n.DeltaQuery(
            node_id("delta_query", tuple(i.id for i in inputs), schema, **params),
            inputs,
            schema,
            **params,
        )
        return Collection(self.flow, node)

    def semijoin(
        self,
        other: Collection,
        on: Sequence[str] | str | None = None,
        *,
        left_on: Sequence[str] | None = None,
        right_on: Sequence[str] | None = None,
        null_safe: bool = False,
    ) -> Collection:
        """Rows of ``self`` whose key occurs in ``other`` (SQL ``EXISTS``/``IN``),
        with their own multiplicity."""
        if on is not None:
            left_on = right_on = (on,) if isinstance(on, str) else tuple(on)
        if left_on is None or right_on is None:
            raise PlanError("semijoin: give `on`, or both `left_on` and `right_on`")
        present = other.select(*right_on).distinct()
        taken = set(self.columns)
        keys = [f"__semi{i}" for i in range(len(right_on))]
        while taken & set(keys):  # never clash with a column of the left side
            keys = [f"_{k}" for k in keys]
        renamed = present.select(**dict(zip(keys, right_on, strict=True)))
        joined = self._inner_join(renamed, tuple(left_on), tuple(keys), tuple(keys), null_safe)
        return joined.select(*self.columns)

    def antijoin(
        self,
        other: Collection,
        on: Sequence[str] | str | None = None,
        *,
        left_on: Sequence[str] | None = None,
        right_on: Sequence[str] | None = None,
        null_safe: bool = False,
    ) -> Collection:
        """Rows of ``self`` whose key does not occur in ``other`` (``NOT EXISTS``)."""
        matched = self.semijoin(other, on, left_on=left_on, right_on=right_on, null_safe=null_safe)
        return self.concat(matched.negate())

    def _reduce(
        self,
        key: tuple[str, ...],
        kind: n.ReduceKind,
        schema: StructType,
        column: str = "",
        identity: dict[str, Any] | None = None,
        beside: tuple[n.Node, ...] = (),
        **params: Any,
    ) -> Collection:
        """``identity``: what stands for some ``params`` in the node id (a function's
        fingerprint for the function); the input as ``Dataflow.keyed`` gives it.
        ``beside``: what a running window's rule reads besides its input."""
        arranged = self.flow.keyed(self.node, key, reads_loop_variable(self.node))
        params.update(key=key, kind=kind, column=column)
        inputs = (arranged, *beside)
        named = node_id(kind, tuple(i.id for i in inputs), schema, **(params | (identity or {})))
        return Collection(self.flow, n.Reduce(named, inputs, schema, **params))

    def top_k(
        self,
        key: Sequence[str],
        order_by: Sequence[str | tuple[str, bool]],
        k: int,
        *,
        hierarchical: bool = False,
        numbering: Numbering = "row_number",
    ) -> Collection:
        """The first ``k`` rows of each key by ``order_by`` (names, or ``(name, descending)``);
        by ``numbering="rank"`` (``"dense_rank"``), the rows whose SQL RANK (DENSE_RANK)
        is at most ``k``, ties included.

        ``hierarchical``: first the top ``k`` of each of 256 buckets of a key (by the
        row's hash), then of those, so a change re-reads one bucket of its key
        and the buckets' top rows, not the whole key: for keys that may be large."""
        order = self._ordering("top_k", order_by)
        if k < 1:
            raise PlanError("top_k: k must be ≥ 1")
        key = tuple(key)
        params: dict[str, Any] = {"order": order, "limit": k}
        if numbering != "row_number":  # the default stays out of existing node ids
            params["numbering"] = numbering
        if not hierarchical:
            return self._reduce(key, "top_k", self.node.schema, **params)
        bucketed = self.select(*self.columns, __bucket=hash_bucket(self.columns, 24))
        level = bucketed._reduce((*key, "__bucket"), "top_k", bucketed.node.schema, **params)
        return level.select(*self.columns)._reduce(key, "top_k", self.node.schema, **params)

    def _ordering(
        self, operator: str, order_by: Sequence[str | tuple[str, bool]]
    ) -> tuple[tuple[str, bool], ...]:
        """``order_by`` as ``(column, descending)`` pairs, every column one of ours."""
        order = tuple((o, False) if isinstance(o, str) else (o[0], bool(o[1])) for o in order_by)
        unknown = [c for c, _ in order if c not in self.columns]
        if unknown:
            raise PlanError(f"{operator}: unknown order columns {unknown}")
        return order

    def first_row(
        self, key: Sequence[str], order_by: Sequence[str | tuple[str, bool]]
    ) -> Collection:
        """The first row of each key by ``order_by`` (as ``top_k``), ties broken by
        the rest of the row: ``top_k(key, order_by, 1)`` kept as MIN and MAX are,
        so an insertion only compares with its key's current row and only a
        retraction of that row reads the key's history (``operators/extremes.py``).

        The row travels as one struct, led by its order values, and is the least
        of its key's (the greatest, for an order leading with a descending
        column); an order value sorted the other way leads reversed. An order
        no struct can follow (a string or float against the lead direction, a
        map in the row) takes the hierarchical top-k."""
        key = tuple(key)
        order = self._ordering("first_row", order_by)
        lead = bool(order) and order[0][1]
        ordered = order_struct([(c, d, not d) for c, d in order], self.node.schema)
        maps = [f.name for f in self.node.schema.fields if isinstance(f.dataType, MapType)]
        if ordered is None or maps or not key:
            return self.top_k(key, order_by, 1, hierarchical=True)
        fields = {f.name: f.sql for f in ordered}  # struct field -> its value
        for c in self.columns:
            fields.setdefault(c, quote(c))
        carried = [f"{v} AS {quote(f)}" for f, v in fields.items() if f not in key]
        side = HIGH if lead else LOW
        row = self.select(*key, **{side: f"struct({', '.join(carried)})"})
        schema = StructType([*(self.node.schema[k] for k in key), row.node.schema[side]])
        first = row._reduce(key, "min_max", schema)
        return first.select(
            *(c if c in key else F.col(side).getField(c).alias(c) for c in self.columns)
        )

    def window(self, partition_by: Sequence[str], **calls: str) -> Collection:
        """The rows with window functions as new columns: each call is Spark SQL
        over one partition of ``partition_by``, without ``PARTITION BY``, e.g.
        ``rank="rank() OVER (ORDER BY amount DESC)"``.

        A change re-evaluates the partitions it touches, reading their history:
        the work follows the partitions touched, not the input (with no
        ``partition_by``, the input is one partition). Running ``SUM``/``COUNT``/
        ``ROW_NUMBER`` over one order (``operators/running.py``) are kept from
        each partition's totals where rows arrive after its last one."""
        key = tuple(partition_by)
        clash = [c for c in calls if c in self.columns]
        if clash or not calls:
            raise PlanError(
                f"window: columns {clash} exist already" if clash else "window: no calls"
            )
        named = tuple(calls.items())
        schema = self.flow.reduced_schema(self.node, key, window(named), "window", named)
        running = running_calls(named, self.node.schema, key)
        ordered = None if running is None else order_struct(running.order, self.node.schema)
        # the rows of a top-k are few per key: re-read whole, they need nothing beside
        few = isinstance(self.node, n.Reduce) and (self.node.kind, self.node.key) == ("top_k", key)
        if running is None or ordered is None or not key or few or reads_loop_variable(self.node):
            return self._reduce(key, "window", schema, calls=named)
        # beside the window: each partition's last row by its order, and its totals
        side = running.side
        ends = self.select(*key, **{side: packed(ordered)})
        last_schema = StructType([*(self.node.schema[k] for k in key), ends.node.schema[side]])
        last = ends._reduce(key, "min_max", last_schema)
        totals = self.accumulate(key, running.values)
        beside = (last.node, totals.node)
        return self._reduce(key, "running", schema, beside=beside, calls=named)

    def threshold(self, multiplicity: str) -> Collection:
        """Map each distinct row's multiplicity through a SQL expression of ``_diff``:
        ``"least(_diff, 1)"`` is ``distinct``; ``"IF(_diff >= 2, 1, 0)"`` keeps, once,
        the rows that occur more than once."""
        return self._reduce(
            tuple(self.columns), "threshold", self.node.schema, multiplicity=multiplicity
        )

    def reduce(
        self,
        key: Sequence[str],
        function: Callable[[Any], Any],
        schema: StructType,
        *,
        version: str | None = None,
    ) -> Collection:
        """A general per-key reduction in Python: ``function(rows) -> rows`` on pandas
        DataFrames, run vectorised per key (``rows`` has ``_diff``, the multiplicity).

        The reduction's trace is named by what ``function`` computes: its code, the
        values it captures and the constants it reads. Where that cannot be told
        (it reads an object without a stable value), name it yourself with
        ``version``, and change the version when the function changes."""
        missing = [k for k in key if k not in schema.fieldNames()]
        if missing:
            raise PlanError(f"reduce: the output schema must keep the key columns {missing}")
        identity = {"function": function_id(function, version)}
        return self._reduce(tuple(key), "general", schema, identity=identity, function=function)

    def distinct(self) -> Collection:
        """Each distinct row once (set semantics).

        Outside a loop, the rows are counted in place (``accumulate`` by every
        column, no values): a change reads the counts of the rows it touches, never
        the history of the input, and no arrangement of the input is kept; a row is
        present while its count is. A loop's times are only partially ordered, so
        there a reduction recomputes each touched row from its input."""
        if reads_loop_variable(self.node):
            return self._reduce(tuple(self.columns), "distinct", self.node.schema, "")
        return self.accumulate(self.columns, ()).select(*self.columns)

    def count(self, key: Sequence[str] = (), name: str = "count") -> Collection:
        """Rows per key: one output row ``(key..., count)`` per key present."""
        key = tuple(key)
        fields = [self.node.schema[k] for k in key] + [StructField(name, LongType(), False)]
        return self._reduce(key, "count", StructType(fields), name)

    def extreme(
        self,
        kind: Literal["min", "max"],
        key: Sequence[str],
        value: str,
        *,
        hierarchical: bool = True,
    ) -> Collection:
        """MIN or MAX of ``value`` per key, ignoring NULLs: one side of ``extremes``.
        Groups known to stay small (a node's in-edges in a graph loop) are cheaper
        reduced in one level: ``hierarchical=False``."""
        key = tuple(key)
        if hierarchical:
            side = LOW if kind == "min" else HIGH
            return self.extremes(key, value).select(*key, renamed(side, value))
        fields = [*[self.node.schema[k] for k in key], self.node.schema[value]]
        present = self.filter(is_not_null(value))
        return present.select(*key, value)._reduce(key, kind, StructType(fields), value)

    def extremes(self, key: Sequence[str], value: str) -> Collection:
        """MIN and MAX of ``value`` per key, ignoring NULLs, as columns ``__min``
        and ``__max``, from one hierarchy of reductions that carries both.

        Each level reduces by ``(key, bucket)`` where the bucket is a prefix of the
        value's hash (``HIERARCHY_SHIFTS``), so retracting the current extreme of a
        huge group re-reads one bucket of it, not the whole group. Both extremes
        ride the same levels: a SQL ``MIN(x), MAX(x)`` costs the traces of one.
        """
        key = tuple(key)
        keys = [self.node.schema[k] for k in key]
        value_type = self.node.schema[value].dataType
        bounds = [StructField(LOW, value_type), StructField(HIGH, value_type)]
        present = self.filter(is_not_null(value))
        level = present.select(
            *key, **{LOW: column(value), HIGH: column(value)}, __bucket=hash_bucket([value])
        )
        for shift in HIERARCHY_SHIFTS:
            bucketed = level.select(*key, LOW, HIGH, __bucket=shifted_right("__bucket", shift))
            schema = StructType([*keys, StructField("__bucket", LongType()), *bounds])
            level = bucketed._reduce((*key, "__bucket"), "min_max", schema)
        return level.select(*key, LOW, HIGH)._reduce(key, "min_max", StructType([*keys, *bounds]))

    def accumulate(self, key: Sequence[str], values: Sequence[str]) -> Collection:
        """Running ``(rows, non-NULL count, sum)`` per key of each value column."""
        key, values = tuple(key), tuple(values)
        schema = self.flow.infer(
            [self.node], lambda df: contributions(df, key, values), ("accumulate", key, values)
        )
        if reads_loop_variable(self.node):
            # Loop times are partially ordered: no running sum in time order exists,
            # so each touched key is recomputed from its input, as any reduction.
            return self._reduce(key, "accumulate", schema, values=values)
        # No arrangement of the input: accumulation never reads the input's history.
        node = n.Accumulate(
            node_id("accumulate", (self.node.id,), schema, key=key, values=values),
            (self.node,),
            schema,
            key=key,
            values=values,
        )
        return Collection(self.flow, node)

    def iterate(
        self,
        body: Callable[[Collection], Collection],
        *,
        max_iterations: int = DEFAULT_ITERATION_LIMIT,
    ) -> Collection:
        """The fixed point of ``body`` starting from this collection: ``x0 = self``,
        ``x(i+1) = body(x(i))``, until an iteration changes nothing.

        ``body`` gets the loop variable and may use any operator on it and on
        collections from outside (they enter the loop as they are), another
        ``iterate`` included. Maintained
        with times ``(epoch, iteration)``, so a change of an input redoes only
        the iterations, and the keys, it affects. An epoch that needs more than
        ``max_iterations`` iterations fails with an error naming the view.

            reach = roots.iterate(lambda r: r.concat(
                r.join(edges, left_on=["node"], right_on=["src"]).select(node="dst")
            ).distinct())
        """

        def step(variable: n.Variable) -> n.Node:
            result = body(Collection(self.flow, variable))
            if not isinstance(result, Collection):
                kind = type(result).__name__
                raise PlanError(f"iterate: the body must return a collection, not {kind}")
            return result.node

        return Collection(self.flow, build_iterate(self.node, step, max_iterations))

    def aggregate(self, by: Sequence[str], **aggregates: Aggregate) -> Collection:
        """SQL GROUP BY: one row per group present, with the named aggregates.
        Without ``by``, one row over the whole input, even an empty one
        (COUNT 0, other aggregates NULL).

        Factored as in Materialize's robust reductions: COUNT/SUM/AVG accumulate
        in place in one reduction; each MIN/MAX is its own hierarchical
        reduction; DISTINCT aggregates reduce a DISTINCT projection. The parts
        are joined back by group key (NULL keys are a group), so the state is
        the sum of the parts, not their product.
        """
        if not aggregates:
            raise PlanError("aggregate: name at least one aggregate")
        return build_aggregate(self, tuple(by), aggregates)
