"""Random dataflows against an independent evaluator, epoch by epoch.

Hypothesis draws small operator trees over two sources of ``(k, v)`` rows and
random insert/delete sequences (duplicates, NULLs, rows inserted and deleted
in the same epoch, empty epochs). Every plan node knows two things: how to
build itself with the collection API, and how to evaluate itself in plain
Python over multisets with SQL's NULL rules. After every epoch each view must
equal the Python evaluation of the accumulated inputs.

Every operator keeps the ``(k, v)`` shape, so any tree is well-formed.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import Collection, Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.runtime import Runtime

pytestmark = pytest.mark.spark

Value = int | None
Row = tuple[Value, Value]
Bag = Counter[Row]
KV = StructType([StructField("k", LongType()), StructField("v", LongType())])
SOURCES = ("a", "b")


class Plan:
    def build(self, src: dict[str, Collection]) -> Collection:
        raise NotImplementedError

    def eval(self, src: dict[str, Bag]) -> Bag:
        raise NotImplementedError


def bag(rows: list[Row]) -> Bag:
    return Counter(rows)


@dataclass(frozen=True)
class Source(Plan):
    name: str

    def build(self, src: dict[str, Collection]) -> Collection:
        return src[self.name]

    def eval(self, src: dict[str, Bag]) -> Bag:
        return Counter(src[self.name])


PREDICATES: dict[str, Callable[[Value, Value], bool]] = {
    "v > 2": lambda k, v: v is not None and v > 2,
    "v IS NULL": lambda k, v: v is None,
    "k = 1 OR v < 2": lambda k, v: k == 1 or (v is not None and v < 2),
}


@dataclass(frozen=True)
class Filter(Plan):
    predicate: str
    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        return self.x.build(src).filter(self.predicate)

    def eval(self, src: dict[str, Bag]) -> Bag:
        keep = PREDICATES[self.predicate]
        return Counter({r: m for r, m in self.x.eval(src).items() if keep(*r)})


@dataclass(frozen=True)
class Minus(Plan):
    """``x`` without the rows matching the predicate, as ``x - filter(x)``: negate."""

    predicate: str
    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        x = self.x.build(src)
        return x.concat(x.filter(self.predicate).negate()).consolidate()

    def eval(self, src: dict[str, Bag]) -> Bag:
        drop = PREDICATES[self.predicate]
        return Counter({r: m for r, m in self.x.eval(src).items() if not drop(*r)})


MAPS: dict[tuple[str, str], Callable[[Value, Value], Row]] = {
    ("k", "v + 1"): lambda k, v: (k, None if v is None else v + 1),
    ("v", "k"): lambda k, v: (v, k),
    ("k", "coalesce(v, k)"): lambda k, v: (k, k if v is None else v),
    ("pmod(k, 2)", "v"): lambda k, v: (None if k is None else k % 2, v),
}


@dataclass(frozen=True)
class Map(Plan):
    exprs: tuple[str, str]
    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        k, v = self.exprs
        return self.x.build(src).select(k=k, v=v)

    def eval(self, src: dict[str, Bag]) -> Bag:
        f = MAPS[self.exprs]
        out: Bag = Counter()
        for r, m in self.x.eval(src).items():
            out[f(*r)] += m
        return out


@dataclass(frozen=True)
class Explode(Plan):
    """Each row becomes ``pmod(coalesce(v, 0), 3) + 1`` rows ``(k, 0..)``."""

    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        arrays = self.x.build(src).select("k", v="sequence(0, pmod(coalesce(v, 0), 3))")
        return arrays.explode("v", "v")

    def eval(self, src: dict[str, Bag]) -> Bag:
        out: Bag = Counter()
        for (k, v), m in self.x.eval(src).items():
            for i in range((v or 0) % 3 + 1):
                out[(k, i)] += m
        return out


@dataclass(frozen=True)
class Concat(Plan):
    x: Plan
    y: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        return self.x.build(src).concat(self.y.build(src))

    def eval(self, src: dict[str, Bag]) -> Bag:
        return self.x.eval(src) + self.y.eval(src)


@dataclass(frozen=True)
class Distinct(Plan):
    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        return self.x.build(src).distinct()

    def eval(self, src: dict[str, Bag]) -> Bag:
        return Counter(set(self.x.eval(src)))


@dataclass(frozen=True)
class Repeated(Plan):
    """Rows occurring at least twice, once each: a threshold on multiplicity."""

    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        return self.x.build(src).threshold("IF(_diff >= 2, 1, 0)")

    def eval(self, src: dict[str, Bag]) -> Bag:
        return Counter({r for r, m in self.x.eval(src).items() if m >= 2})


def groups(rows: Bag) -> dict[Value, list[Value]]:
    """Values per key, repeated by multiplicity; NULL keys form one group (GROUP BY)."""
    out: dict[Value, list[Value]] = {}
    for (k, v), m in rows.items():
        out.setdefault(k, []).extend([v] * m)
    return out


AGGREGATES: dict[str, tuple[Callable[[str], agg.Aggregate], Callable[[list[Value]], Value]]] = {
    "count(*)": (lambda c: agg.count(), len),
    "count": (agg.count, lambda vs: sum(v is not None for v in vs)),
    "count distinct": (
        lambda c: agg.count(c, distinct=True),
        lambda vs: len({v for v in vs if v is not None}),
    ),
    "sum": (agg.sum_, lambda vs: sum(v for v in vs if v is not None) if any_value(vs) else None),
    "min": (agg.min_, lambda vs: min(v for v in vs if v is not None) if any_value(vs) else None),
    "max": (agg.max_, lambda vs: max(v for v in vs if v is not None) if any_value(vs) else None),
}


def any_value(vs: list[Value]) -> bool:
    return any(v is not None for v in vs)


@dataclass(frozen=True)
class Aggregate(Plan):
    """``SELECT k, f(v) FROM x GROUP BY k``, or without GROUP BY (then ``k`` is 0)."""

    function: str
    grouped: bool
    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        make, _ = AGGREGATES[self.function]
        x = self.x.build(src)
        if self.grouped:
            return x.aggregate(["k"], v=make("v"))
        return x.aggregate([], v=make("v")).select(k=F.lit(0).cast("long"), v="v")

    def eval(self, src: dict[str, Bag]) -> Bag:
        _, compute = AGGREGATES[self.function]
        rows = self.x.eval(src)
        if not self.grouped:
            return Counter([(0, compute([v for (_, v), m in rows.items() for _ in range(m)]))])
        return Counter((k, compute(vs)) for k, vs in groups(rows).items())


def spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows per key counted in Python: a general reduce with a vectorised callback."""
    return pd.DataFrame({"k": [int(rows["k"].iloc[0])], "v": [int(rows["_diff"].sum())]})


@dataclass(frozen=True)
class Reduce(Plan):
    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        return self.x.build(src).filter("k IS NOT NULL").reduce(["k"], spread, KV)

    def eval(self, src: dict[str, Bag]) -> Bag:
        return Counter((k, len(vs)) for k, vs in groups(self.x.eval(src)).items() if k is not None)


@dataclass(frozen=True)
class TopK(Plan):
    """The two smallest ``v`` per key (ascending puts NULLs first, as Spark does)."""

    x: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        return self.x.build(src).top_k(["k"], ["v"], 2)

    def eval(self, src: dict[str, Bag]) -> Bag:
        out: Bag = Counter()
        for k, vs in groups(self.x.eval(src)).items():
            ordered = sorted(vs, key=lambda v: (v is not None, v or 0))
            out.update((k, v) for v in ordered[:2])
        return out


@dataclass(frozen=True)
class Join(Plan):
    """``x`` joined with ``y`` on ``k`` (NULL keys never match); ``v`` from ``x``,
    else from ``y`` (outer joins pad with NULLs)."""

    how: str
    x: Plan
    y: Plan

    def build(self, src: dict[str, Collection]) -> Collection:
        x, y = self.x.build(src), self.y.build(src).select("k", w="v")
        if self.how == "semi":
            return x.semijoin(y, on="k")
        if self.how == "anti":
            return x.antijoin(y, on="k")
        return x.join(y, on="k", how=self.how).select("k", v="coalesce(v, w)")  # type: ignore[arg-type]

    def eval(self, src: dict[str, Bag]) -> Bag:
        xs, ys = self.x.eval(src), self.y.eval(src)
        out: Bag = Counter()
        matched_y: set[Row] = set()
        for (k, v), m in xs.items():
            partners = [(r, n) for r, n in ys.items() if k is not None and r[0] == k]
            matched_y |= {r for r, _ in partners}
            if self.how == "semi":
                out[(k, v)] += m if partners else 0
            elif self.how == "anti":
                out[(k, v)] += 0 if partners else m
            elif partners:
                for (_, w), n in partners:
                    out[(k, w if v is None else v)] += m * n
            elif self.how in ("left", "full"):
                out[(k, v)] += m
        if self.how in ("right", "full"):
            for r, n in ys.items():
                if r not in matched_y:
                    out[r] += n
        return +out


LEAF = st.sampled_from([Source(s) for s in SOURCES])
FILTERS = st.sampled_from(sorted(PREDICATES))
Inner = st.SearchStrategy[Plan]
OPERATORS: list[Callable[[Inner], Inner]] = [
    lambda x: st.builds(Filter, FILTERS, x),
    lambda x: st.builds(Minus, FILTERS, x),
    lambda x: st.builds(Map, st.sampled_from(sorted(MAPS)), x),
    lambda x: st.builds(Explode, x),
    lambda x: st.builds(Distinct, x),
    lambda x: st.builds(Repeated, x),
    lambda x: st.builds(Aggregate, st.sampled_from(sorted(AGGREGATES)), st.booleans(), x),
    lambda x: st.builds(Reduce, x),
    lambda x: st.builds(TopK, x),
    lambda x: st.builds(Concat, x, x),
    lambda x: st.builds(
        Join, st.sampled_from(["inner", "left", "right", "full", "semi", "anti"]), x, x
    ),
]
SUBTREES = st.recursive(LEAF, lambda x: st.one_of(*(op(x) for op in OPERATORS)), max_leaves=2)


def rooted(operators: range) -> st.SearchStrategy[tuple[Plan, ...]]:
    """One view per operator, each rooted at it over random subtrees: every
    operator is exercised in every example, whatever else is drawn."""
    return st.tuples(*(OPERATORS[i](SUBTREES) for i in operators))


def changes(rng: random.Random, live: Bag, epoch: int) -> list[tuple[Row, int]]:
    """Inserts (duplicates and NULLs), deletes of live rows, a row inserted and
    deleted in the same epoch; every fourth epoch may be empty."""
    if epoch % 4 == 3 and rng.random() < 0.5:
        return []

    def row() -> Row:
        return (rng.choice([0, 1, 2, None]), rng.choice([0, 1, 2, 3, 4, None]))

    out = [(r, 1) for r in (row() for _ in range(rng.randrange(1, 6)))]
    out += [(r, -1) for r in rng.sample(sorted(live.elements(), key=str), min(2, len(+live)))]
    fleeting = row()
    return [*out, (fleeting, 1), (fleeting, -1)]


@pytest.mark.parametrize(
    "operators", [range(0, 6), range(6, len(OPERATORS))], ids=["linear", "stateful"]
)
@settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_random_dataflows_equal_python(
    spark: SparkSession,
    tmp_path_factory: pytest.TempPathFactory,
    operators: range,
    data: st.DataObject,
    seed: int,
) -> None:
    plans = data.draw(rooted(operators), label="plans")
    flow = Dataflow(spark, tmp_path_factory.mktemp("warehouse"))
    sources = {s: flow.source(s, KV, key=["k"]) for s in SOURCES}
    for i, plan in enumerate(plans):
        flow.view(f"v{i}", plan.build(sources))
    rt = Runtime(flow)
    rng = random.Random(seed)
    live: dict[str, Bag] = {s: Counter() for s in SOURCES}
    history: list[dict[str, Bag]] = []
    full = StructType([*KV.fields, StructField("_diff", LongType())])
    epoch = 0
    for epochs_in_run in (3, 2):
        for _ in range(epochs_in_run):
            for s in SOURCES:
                batch = changes(rng, live[s], epoch)
                df = spark.createDataFrame([(*r, d) for r, d in batch], full)
                rt.append_source(s, df, epoch)
                for r, d in batch:
                    live[s][r] += d
            history.append({s: +live[s] for s in SOURCES})
            epoch += 1
        assert rt.run().upper == epoch
    for e, inputs in enumerate(history):
        for i, plan in enumerate(plans):
            got = Counter(tuple(r) for r in rt.read(f"v{i}", e).collect())
            assert got == plan.eval(inputs), (f"v{i}", plan, e)
