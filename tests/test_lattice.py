"""Unit and property tests of logical times and antichains (frontiers).

Times are tuples of ints under the product order; an antichain ``F`` stands for
the set of times in advance of it. Set-level claims are checked exhaustively over
a small grid of times.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_etl.lattice import (
    Antichain,
    Time,
    advance_by,
    enter,
    epoch,
    join,
    leave,
    less_equal,
    less_than,
    meet,
    meet_all,
)

DIMS = [1, 2, 3]
MAX_COORD = 7

coords = st.integers(0, MAX_COORD)
FAST = settings(max_examples=30, deadline=None)


def times(dims: int) -> st.SearchStrategy[Time]:
    return st.tuples(*([coords] * dims))


def antichains(dims: int, min_size: int = 0, max_size: int = 4) -> st.SearchStrategy[Antichain]:
    return st.lists(times(dims), min_size=min_size, max_size=max_size).map(
        lambda ts: Antichain(tuple(ts))
    )


def _grid(dims: int, size: int) -> list[Time]:
    return [tuple(t) for t in itertools.product(range(size), repeat=dims)]


GRID7 = {d: _grid(d, 7) for d in DIMS}
GRID8 = {d: _grid(d, 8) for d in DIMS}


def in_advance(f: Antichain, grid: list[Time]) -> set[Time]:
    return {t for t in grid if f.less_equal_time(t)}


def shifted(t: Time, deltas: list[int], sign: int) -> Time:
    return tuple(max(0, x + sign * d) for x, d in zip(t, deltas, strict=True))


def draw_lower(data: st.DataObject, sources: list[Antichain], dims: int) -> Antichain:
    """A frontier at or before every frontier in ``sources``."""
    lowered = [
        shifted(t, data.draw(st.lists(coords, min_size=dims, max_size=dims)), -1)
        for f in sources
        for t in f
    ]
    extra = data.draw(st.lists(times(dims), max_size=2))
    return Antichain((*lowered, *extra))


def draw_upper(data: st.DataObject, sources: list[Antichain], dims: int) -> Antichain:
    """A frontier at or beyond every frontier in ``sources``."""
    if any(f.is_empty() for f in sources):
        return Antichain.empty()
    n = data.draw(st.integers(0, 3))
    elements = []
    for _ in range(n):
        t = tuple([0] * dims)
        for f in sources:
            t = join(t, data.draw(st.sampled_from(f.elements)))
        elements.append(shifted(t, data.draw(st.lists(coords, min_size=dims, max_size=dims)), 1))
    return Antichain(tuple(elements))


def is_antichain(f: Antichain) -> bool:
    return all(
        not less_equal(a, b) and not less_equal(b, a) for a, b in itertools.combinations(f, 2)
    )


# ---------------------------------------------------------------------------
# Times


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_join_meet_lattice_laws(dims: int, data: st.DataObject) -> None:
    a, b, c = (data.draw(times(dims)) for _ in range(3))
    assert join(a, b) == join(b, a)
    assert meet(a, b) == meet(b, a)
    assert join(join(a, b), c) == join(a, join(b, c))
    assert meet(meet(a, b), c) == meet(a, meet(b, c))
    assert join(a, a) == a
    assert meet(a, a) == a
    assert join(a, meet(a, b)) == a
    assert meet(a, join(a, b)) == a


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_join_meet_are_bounds(dims: int, data: st.DataObject) -> None:
    a, b, c = (data.draw(times(dims)) for _ in range(3))
    assert less_equal(a, join(a, b)) and less_equal(b, join(a, b))
    assert less_equal(meet(a, b), a) and less_equal(meet(a, b), b)
    if less_equal(a, c) and less_equal(b, c):
        assert less_equal(join(a, b), c)
    if less_equal(c, a) and less_equal(c, b):
        assert less_equal(c, meet(a, b))


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_less_equal_consistent_with_join_meet(dims: int, data: st.DataObject) -> None:
    a = data.draw(times(dims))
    b = data.draw(st.one_of(times(dims), st.just(a), times(dims).map(lambda d: join(a, d))))
    le = less_equal(a, b)
    assert le == (join(a, b) == b)
    assert le == (meet(a, b) == a)
    assert less_than(a, b) == (le and a != b)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_less_equal_is_partial_order(dims: int, data: st.DataObject) -> None:
    a, b, c = (data.draw(times(dims)) for _ in range(3))
    assert less_equal(a, a)
    if less_equal(a, b) and less_equal(b, a):
        assert a == b
    if less_equal(a, b) and less_equal(b, c):
        assert less_equal(a, c)
    # transitivity along a chain that is certainly ordered
    ab = join(a, b)
    abc = join(ab, c)
    assert less_equal(a, ab) and less_equal(ab, abc) and less_equal(a, abc)


def test_less_equal_is_product_order() -> None:
    assert less_equal((1, 2), (1, 3))
    assert not less_equal((1, 3), (2, 2))
    assert not less_equal((2, 2), (1, 3))
    assert less_equal(epoch(3), epoch(4))
    assert not less_than((1, 2), (1, 2))
    assert join((1, 3), (2, 2)) == (2, 3)
    assert meet((1, 3), (2, 2)) == (1, 2)


@pytest.mark.parametrize(
    ("a", "b"),
    [((1,), (1, 0)), ((0, 0), (0, 0, 0)), ((), (0,)), ((1, 2, 3), (1, 2))],
)
def test_mixed_scopes_rejected(a: Time, b: Time) -> None:
    for op in (less_equal, less_than, join, meet):
        with pytest.raises(ValueError):
            op(a, b)
        with pytest.raises(ValueError):
            op(b, a)


def test_antichain_rejects_mixed_scopes() -> None:
    with pytest.raises(ValueError):
        Antichain.of((1,), (0, 2))
    with pytest.raises(ValueError):
        Antichain.of((1,)).less_equal_time((1, 0))


@FAST
@given(t=st.integers(1, 3).flatmap(times))
def test_enter_leave_round_trip(t: Time) -> None:
    assert leave(enter(t)) == t
    assert enter(t) == (*t, 0)
    if len(t) >= 2:
        assert len(leave(t)) == len(t) - 1
        if t[-1] == 0:
            assert enter(leave(t)) == t


@pytest.mark.parametrize("dims", [2, 3])
@FAST
@given(data=st.data())
def test_enter_leave_monotone(dims: int, data: st.DataObject) -> None:
    a, b = data.draw(times(dims)), data.draw(times(dims))
    assert less_equal(a, b) == less_equal(enter(a), enter(b))
    if less_equal(a, b):
        assert less_equal(leave(a), leave(b))


def test_leave_outside_loop_rejected() -> None:
    with pytest.raises(ValueError):
        leave((3,))
    with pytest.raises(ValueError):
        leave(())


# ---------------------------------------------------------------------------
# Antichains


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_construction_gives_minimal_antichain(dims: int, data: st.DataObject) -> None:
    ts = data.draw(st.lists(times(dims), max_size=6))
    f = Antichain(tuple(ts))
    assert is_antichain(f)
    assert list(f.elements) == sorted(set(f.elements))
    assert set(f.elements) <= set(ts)
    # every input time is in advance of the antichain built from it
    assert all(f.less_equal_time(t) for t in ts)
    assert f == Antichain(tuple(reversed(ts + ts)))
    assert len(f) == len(f.elements)
    assert f.is_empty() == (not ts)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_insert(dims: int, data: st.DataObject) -> None:
    f = data.draw(antichains(dims))
    t = data.draw(times(dims))
    g = f.insert(t)
    assert is_antichain(g)
    assert g.less_equal_time(t)
    if f.less_equal_time(t):
        assert g is f
    else:
        assert t in g.elements
        assert g == Antichain((*f.elements, t))
    grid = GRID7[dims]
    assert in_advance(g, grid) == in_advance(f, grid) | {u for u in grid if less_equal(t, u)}


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_insert_in_advance_returns_same(dims: int, data: st.DataObject) -> None:
    f = data.draw(antichains(dims, min_size=1))
    base = data.draw(st.sampled_from(f.elements))
    t = join(base, data.draw(times(dims)))
    assert f.insert(t) is f


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_less_equal_time_matches_definition(dims: int, data: st.DataObject) -> None:
    f = data.draw(antichains(dims))
    t = data.draw(times(dims))
    assert f.less_equal_time(t) == any(less_equal(e, t) for e in f)
    assert f.less_than_time(t) == any(less_than(e, t) for e in f)


def test_antichain_examples() -> None:
    f = Antichain.of((2, 0), (0, 2), (1, 1), (2, 2), (3, 0))
    assert f.elements == ((0, 2), (1, 1), (2, 0))
    assert f.less_equal_time((1, 5))
    assert not f.less_equal_time((0, 1))
    assert Antichain.from_epoch(4) == Antichain.of((4,))
    assert Antichain.minimum(2) == Antichain.of((0, 0))
    assert repr(Antichain.of((1,), (3,))) == "{1}"
    assert repr(Antichain.of((1, 2))) == "{(1, 2)}"


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_frontier_order(dims: int, data: st.DataObject) -> None:
    a = data.draw(antichains(dims))
    b = data.draw(st.one_of(antichains(dims), st.just(a)))
    c = draw_upper(data, [b], dims)
    assert a.less_equal(a)
    assert b.less_equal(c)
    assert a.dominates(b) == b.less_equal(a)
    assert b.dominates(a) == a.less_equal(b)
    if a.less_equal(b):
        assert a.less_equal(c)
    if a.less_equal(b) and b.less_equal(a):
        assert a == b
    grid = GRID8[dims]
    assert a.less_equal(b) == (in_advance(b, grid) <= in_advance(a, grid))


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_frontier_order_transitive(dims: int, data: st.DataObject) -> None:
    a = data.draw(antichains(dims))
    b = draw_upper(data, [a], dims)
    c = draw_upper(data, [b], dims)
    assert a.less_equal(b) and b.less_equal(c)
    assert a.less_equal(c)
    assert c.dominates(a)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_frontier_meet_is_greatest_lower_bound(dims: int, data: st.DataObject) -> None:
    a, b = data.draw(antichains(dims)), data.draw(antichains(dims))
    m = a.meet(b)
    assert is_antichain(m)
    assert m == b.meet(a)
    assert m.less_equal(a) and m.less_equal(b)
    c = draw_lower(data, [a, b], dims)
    assert c.less_equal(a) and c.less_equal(b)
    assert c.less_equal(m)
    r = data.draw(antichains(dims))
    if r.less_equal(a) and r.less_equal(b):
        assert r.less_equal(m)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_frontier_join_is_least_upper_bound(dims: int, data: st.DataObject) -> None:
    a, b = data.draw(antichains(dims)), data.draw(antichains(dims))
    j = a.join(b)
    assert is_antichain(j)
    assert j == b.join(a)
    assert a.less_equal(j) and b.less_equal(j)
    c = draw_upper(data, [a, b], dims)
    assert a.less_equal(c) and b.less_equal(c)
    assert j.less_equal(c)
    r = data.draw(antichains(dims))
    if a.less_equal(r) and b.less_equal(r):
        assert j.less_equal(r)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_meet_join_as_sets(dims: int, data: st.DataObject) -> None:
    a, b = data.draw(antichains(dims)), data.draw(antichains(dims))
    grid = GRID7[dims]
    sa, sb = in_advance(a, grid), in_advance(b, grid)
    assert in_advance(a.meet(b), grid) == sa | sb
    assert in_advance(a.join(b), grid) == sa & sb


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_empty_antichain(dims: int, data: st.DataObject) -> None:
    empty = Antichain.empty()
    f = data.draw(antichains(dims))
    t = data.draw(times(dims))
    assert empty.is_empty() and len(empty) == 0
    assert not empty.less_equal_time(t)
    assert not empty.less_than_time(t)
    assert empty.dominates(f)
    assert f.less_equal(empty)
    assert empty.meet(f) == f
    assert empty.join(f) == empty
    assert empty.epoch_bound() is None
    assert Antichain.minimum(dims).less_equal(f)


def test_meet_all() -> None:
    assert meet_all([]) == Antichain.empty()
    assert meet_all([Antichain.empty()]) == Antichain.empty()
    fs = [Antichain.of((1, 3)), Antichain.of((2, 2), (0, 5)), Antichain.of((1, 4))]
    assert meet_all(fs) == Antichain.of((0, 5), (1, 3), (2, 2))


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_meet_all_is_folded_meet(dims: int, data: st.DataObject) -> None:
    fs = data.draw(st.lists(antichains(dims), max_size=4))
    m = meet_all(fs)
    assert all(m.less_equal(f) for f in fs)
    grid = GRID7[dims]
    assert in_advance(m, grid) == set().union(*(in_advance(f, grid) for f in fs))


@FAST
@given(f=st.integers(1, 3).flatmap(antichains))
def test_json_round_trip(f: Antichain) -> None:
    value = f.to_json()
    assert all(isinstance(t, list) for t in value)
    assert Antichain.from_json(value) == f
    assert Antichain.from_json(json.loads(json.dumps(value))) == f


# ---------------------------------------------------------------------------
# advance_by


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_advance_by_indistinguishable_beyond_frontier(dims: int, data: st.DataObject) -> None:
    f = data.draw(antichains(dims, min_size=1))
    t = data.draw(times(dims))
    adv = advance_by(t, f)
    for u in GRID8[dims]:
        if f.less_equal_time(u):
            assert less_equal(t, u) == less_equal(adv, u), (t, f, adv, u)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_advance_by_basic_properties(dims: int, data: st.DataObject) -> None:
    f = data.draw(antichains(dims, min_size=1))
    t = data.draw(times(dims))
    adv = advance_by(t, f)
    assert len(adv) == dims
    assert less_equal(t, adv)
    assert advance_by(adv, f) == adv
    assert advance_by(t, Antichain.empty()) == t
    # each join(t, e) is indistinguishable from t beyond f, and adv is the greatest such time
    assert all(less_equal(adv, join(t, e)) for e in f)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_advance_by_single_element_frontier(dims: int, data: st.DataObject) -> None:
    e = data.draw(times(dims))
    t = data.draw(times(dims))
    f = Antichain.of(e)
    adv = advance_by(t, f)
    assert adv == join(t, e)
    assert f.less_equal_time(adv)


@FAST
@given(data=st.data())
def test_advance_by_epochs_lands_in_frontier(data: st.DataObject) -> None:
    f = data.draw(antichains(1, min_size=1))
    t = data.draw(times(1))
    adv = advance_by(t, f)
    assert f.less_equal_time(adv)
    assert adv == (max(t[0], f.elements[0][0]),)


def test_advance_by_multi_element_frontier_may_stay_behind() -> None:
    # With incomparable frontier elements the advanced time is the meet of the
    # joins, which need not itself be in advance of the frontier.
    f = Antichain.of((0, 1), (1, 0))
    assert advance_by((0, 0), f) == (0, 0)
    assert not f.less_equal_time(advance_by((0, 0), f))
    assert advance_by((0, 0), Antichain.of((2, 1), (1, 2))) == (1, 1)
    assert advance_by((3, 0), Antichain.of((2, 1), (1, 2))) == (3, 1)


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_advance_by_monotone_in_time(dims: int, data: st.DataObject) -> None:
    f = data.draw(antichains(dims, min_size=1))
    t = data.draw(times(dims))
    u = join(t, data.draw(times(dims)))
    assert less_equal(advance_by(t, f), advance_by(u, f))


# ---------------------------------------------------------------------------
# epoch_bound


@pytest.mark.parametrize("dims", DIMS)
@FAST
@given(data=st.data())
def test_epoch_bound_monotone(dims: int, data: st.DataObject) -> None:
    a = data.draw(antichains(dims, min_size=1))
    b = draw_upper(data, [a], dims)
    if b.is_empty():
        b = b.insert(data.draw(st.sampled_from(a.elements)))
    assert a.less_equal(b)
    ea, eb = a.epoch_bound(), b.epoch_bound()
    assert ea is not None and eb is not None
    assert ea <= eb
    assert ea == min(t[0] for t in a)
    r = data.draw(antichains(dims, min_size=1))
    if a.less_equal(r):
        er = r.epoch_bound()
        assert er is not None and ea <= er


def test_epoch_bound_examples() -> None:
    assert Antichain.from_epoch(5).epoch_bound() == 5
    assert Antichain.of((3, 9), (4, 0)).epoch_bound() == 3
    assert Antichain.empty().epoch_bound() is None
