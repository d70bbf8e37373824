"""The plan graph's pure functions, on hand-built nodes: no Spark session."""

from __future__ import annotations

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.plan import nodes as n
from dd_etl.plan.graph import (
    batch_bound,
    columns_read,
    dependants,
    distinct_updates,
    keyed_by,
    keyed_leaves,
    layers,
    passed_through,
    stateful,
    trace_key,
    traces_read,
    unique_key,
    upstream,
)
from dd_etl.plan.loops import body_of, loop_nest, reads_loop_variable

SCHEMA = StructType([StructField("k", LongType()), StructField("v", LongType())])


def graph() -> dict[str, n.Node]:
    """A source, its arrangement by ``k``, a reduction of it, a filter (no trace)
    over the source, and two views: one of the reduction, one of the filter."""
    src = n.Source("s", (), SCHEMA, name="t", key=("k",))
    arr = n.Arrange("a", (src,), SCHEMA, key=("k",))
    red = n.Reduce("r", (arr,), SCHEMA, key=("k",), kind="min", column="v")
    flt = n.Filter("f", (src,), SCHEMA, predicate="v > 0")
    v1 = n.View("v1", (red,), SCHEMA, name="mins")
    v2 = n.View("v2", (flt,), SCHEMA, name="positive")
    return {x.id: x for x in (src, arr, red, flt, v1, v2)}


def test_upstream_lists_every_node_once_inputs_first() -> None:
    g = graph()
    order = [x.id for x in upstream([g["v1"], g["v2"]])]
    assert sorted(order) == sorted(g)
    assert all(order.index(i.id) < order.index(x) for x in order for i in g[x].inputs)


def test_under_a_recomputed_view_only_sources_and_views_count() -> None:
    g = graph()
    assert [x.id for x in upstream([g["v1"]], recomputed=["mins"])] == ["s", "v1"]


def test_layers_put_each_trace_after_the_traces_it_reads() -> None:
    g = graph()
    kept = [x for x in upstream([g["v1"], g["v2"]]) if x.trace_name is not None]
    assert [[x.id for x in layer] for layer in layers(kept)] == [["s"], ["a", "v2"], ["r"], ["v1"]]


def test_a_node_reads_its_nearest_traces_through_untraced_nodes() -> None:
    g = graph()
    assert [x.id for x in traces_read(g["v2"])] == ["s"]  # through the filter
    assert [x.id for x in traces_read(g["r"])] == ["a"]  # not the source below it
    both = n.Concat("c", (g["f"], g["r"]), SCHEMA)
    assert [x.id for x in traces_read(n.View("v3", (both,), SCHEMA, name="all"))] == ["s", "r"]
    assert traces_read(g["s"]) == []


def test_a_batch_is_bounded_by_what_its_trace_reads_where_no_operator_multiplies_rows() -> None:
    g = graph()
    held = {"s": 10, "a": 7, "r": 3}

    def records(x: n.Node) -> int:
        return held[x.id]

    assert batch_bound(g["a"], records, fresh=False) == 10  # an arrangement: its input
    assert batch_bound(g["r"], records, fresh=True) == 7  # a key's row, nothing to retract
    assert batch_bound(g["r"], records, fresh=False) == 14  # a retraction and an insertion
    assert batch_bound(g["v2"], records, fresh=False) == 10  # through the filter
    assert batch_bound(g["s"], records, fresh=False) is None  # a source reads nothing
    joined = n.Join(
        "j", (g["a"], g["a"]), SCHEMA, left_key=("k",), right_key=("k",), right_columns=("v",)
    )
    assert batch_bound(n.View("vj", (joined,), SCHEMA, name="j"), records, fresh=False) is None
    top = n.Reduce("t", (g["a"],), SCHEMA, key=("k",), kind="top_k", limit=2)
    assert batch_bound(top, records, fresh=True) is None  # more than a row per key


def test_a_trace_of_another_traces_updates_needs_no_consolidation() -> None:
    g = graph()
    assert distinct_updates(g["a"])  # the source's own updates, rearranged
    assert distinct_updates(g["v1"])  # the reduction's
    assert distinct_updates(g["v2"])  # filtered
    negated = n.View("vn", (n.Negate("neg", (g["s"],), SCHEMA),), SCHEMA, name="neg")
    assert distinct_updates(negated)
    projected = n.Select("p", (g["s"],), SCHEMA, exprs=("k",))
    assert not distinct_updates(n.Arrange("ap", (projected,), SCHEMA, key=("k",)))  # may collide
    both = n.Concat("c", (g["s"], g["s"]), SCHEMA)
    assert not distinct_updates(n.View("vc", (both,), SCHEMA, name="both"))  # equal rows twice
    assert not distinct_updates(g["r"])  # a reduction's changes are computed, not read


def test_trace_keys() -> None:
    g = graph()
    assert trace_key(g["r"]) == ("k",)
    assert trace_key(g["v1"]) == ("k", "v")  # a view is keyed by all its columns
    assert keyed_by(g["a"], ["k"]) and not keyed_by(g["a"], ["v"])
    assert not keyed_by(g["f"], ["k", "v"])  # keeps no trace


def test_keyed_leaves_are_the_traces_a_linear_node_reads_keyed_alike() -> None:
    """An aggregate's collapse reads its parts' traces through projections that
    keep the group key: their histories stand for an arrangement of the union."""
    g = graph()
    acc = n.Accumulate("c", (g["a"],), SCHEMA, key=("k",), values=("v",))
    kept = n.Select("p1", (g["r"],), SCHEMA, exprs=("k",), named=(("v", "v"),))
    other = n.Select("p2", (acc,), SCHEMA, exprs=("k", "v"))
    union = n.Concat("u", (kept, n.Negate("neg", (other,), SCHEMA)), SCHEMA)
    assert [x.id for x in keyed_leaves(union, ["k"]) or []] == ["r", "c"]
    assert keyed_leaves(g["r"], ["k"]) == [g["r"]]  # a trace keyed so: itself
    renamed = n.Select("p3", (g["r"],), SCHEMA, named=(("k", "v + 1"), ("v", "v")))
    assert keyed_leaves(renamed, ["k"]) is None  # the key is computed, not passed
    assert keyed_leaves(g["f"], ["k", "v"]) is None  # its source is keyed by k alone
    assert keyed_leaves(g["a"], ["v"]) is None  # a trace keyed otherwise


def test_keyed_leaves_follow_a_key_renamed_on_its_way() -> None:
    """A semi-join names its probe's key afresh (``__semi0``): the column is still
    the trace's key, hashed alike, and the join reads the trace under it."""
    g = graph()
    named = n.Select("p", (g["r"],), SCHEMA, named=(("__semi0", "k"),))
    twice = n.Select("q", (n.Filter("f2", (named,), SCHEMA, predicate="TRUE"),), SCHEMA,
                     named=(("j", "`__semi0`"),))  # fmt: skip
    assert keyed_leaves(named, ["__semi0"]) == [g["r"]]
    assert keyed_leaves(twice, ["j"]) == [g["r"]]
    assert passed_through(twice) == {"j": "__semi0"}
    swapped = n.Select("w", (g["r"],), SCHEMA, named=(("k", "v"), ("v", "k")))
    assert keyed_leaves(swapped, ["v"]) == [g["r"]]  # v is the input's k
    assert keyed_leaves(swapped, ["k"]) is None  # k is the input's v: not its key
    both = n.Select("b", (g["r"],), SCHEMA, exprs=("k",), named=(("k2", "k"),))
    assert keyed_leaves(both, ["k", "k2"]) is None  # one column twice is no trace's key


def test_unique_keys_pass_projections_filters_and_joins_meeting_one_row_per_key() -> None:
    """A reduction of one row per key has a unique key; it survives what keeps its
    columns and never repeats a row, and nothing else has one."""
    g = graph()
    assert unique_key(g["v1"]) == ("k",)  # a view of a MIN per k
    assert unique_key(g["v2"]) is None  # a filtered source: nothing known
    sums = n.Accumulate("c", (g["a"],), SCHEMA, key=("k",), values=("v",))
    kept = n.Select("p1", (sums,), SCHEMA, exprs=("k",), named=(("total", "v"),))
    assert unique_key(n.Filter("f1", (kept,), SCHEMA, predicate="total > 0")) == ("k",)
    assert unique_key(n.Select("p2", (sums,), SCHEMA, exprs=("v",))) is None  # key dropped
    shadowed = n.Select("p3", (sums,), SCHEMA, exprs=("k",), named=(("k", "v + 1"),))
    assert unique_key(shadowed) is None  # the key's name computed anew
    renamed = n.Select("p4", (kept,), SCHEMA, named=(("id", "`k`"), ("k", "total")))
    assert unique_key(renamed) == ("id",)  # followed through a rename
    top = n.Reduce("t", (g["a"],), SCHEMA, key=("k",), kind="top_k", limit=3)
    assert unique_key(top) is None  # several rows per key

    def join(left: n.Node, right: n.Node) -> n.Join:
        sides = tuple(n.Arrange(f"a{x.id}", (x,), SCHEMA, key=("k",)) for x in (left, right))
        return n.Join("j", sides, SCHEMA, left_key=("k",), right_key=("k",), right_columns=("v",))

    assert unique_key(join(g["r"], sums)) == ("k",)  # an aggregate's parts, joined by k
    assert unique_key(join(g["r"], g["s"])) is None  # a k may meet many source rows
    assert unique_key(join(g["s"], g["r"])) is None


def test_a_sources_columns_read_are_those_its_projections_name() -> None:
    """A projection reads the columns it names, anything else all of them; a declared
    key is read, the default key (every column) is not."""
    wide = StructType([*SCHEMA.fields, StructField("note", LongType())])
    keyed = n.Source("s", (), wide, name="t", key=("k",))
    unkeyed = n.Source("u", (), wide, name="u", key=("k", "v", "note"))
    for src, read in ((keyed, {"k", "v"}), (unkeyed, {"v"})):
        named = n.Select("p", (src,), SCHEMA, named=(("value", "`v`"),))
        assert columns_read(src, [src, named]) == read
        computed = n.Select("c", (src,), SCHEMA, named=(("value", "v + 1"),))
        assert columns_read(src, [src, named, computed]) == {"k", "v", "note"}
        kept = n.Filter("f", (src,), wide, predicate="v > 0")
        assert columns_read(src, [kept]) == {"k", "v", "note"}


def test_a_node_needs_its_required_fields_by_name() -> None:
    src = n.Source("s", (), SCHEMA, name="t", key=("k",))
    with pytest.raises(TypeError, match="kind"):
        n.Reduce("r", (src,), SCHEMA, key=("k",))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        n.Arrange("a", (src,), SCHEMA, ("k",))  # type: ignore[misc]


def test_stateful_nodes_are_those_keeping_traces_and_dependants_follow_reads() -> None:
    g = graph()
    views = [g["v1"], g["v2"]]
    assert [x.id for x in stateful(views)] == ["s", "a", "r", "v1", "v2"]
    assert [x.id for x in stateful(views, recomputed=["mins"])] == ["s", "v1", "v2"]
    assert [v.id for v in dependants(views, {"r"})] == ["v1"]
    assert [v.id for v in dependants(views, {"s"})] == ["v1", "v2"]
    assert [v.id for v in dependants(views, {"v2"})] == ["v2"]


def test_a_loop_body_is_what_reads_its_variable_nested_loops_one_deeper() -> None:
    src = n.Source("s", (), SCHEMA, name="t", key=("k",))
    var = n.Variable("x", (), SCHEMA)
    inner_var = n.Variable("y", (), SCHEMA)
    inner_body = n.Filter("g", (inner_var,), SCHEMA, predicate="v > 1")
    inner = n.Iterate("i2", (var,), SCHEMA, variable=inner_var, result=inner_body, limit=5)
    step = n.Concat("c", (inner, src), SCHEMA)
    loop = n.Iterate("i1", (src,), SCHEMA, variable=var, result=step, limit=5)
    assert [x.id for x in body_of(loop)] == ["x", "i2", "c"]
    assert {i: d for i, (_, d) in loop_nest(loop).items()} == {
        "x": 1,
        "i2": 1,
        "y": 2,
        "g": 2,
        "c": 1,
    }
    assert reads_loop_variable(step) and not reads_loop_variable(src)
