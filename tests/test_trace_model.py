"""Property and script tests of the trace logic against the in-memory model.

The reference is the plain list of every update ever appended: accumulating the
trace at any time in advance of its ``since`` must agree with it, whatever
appends, holds, merges and compactions happened in between (invariant 2 of ARCHITECTURE.md).
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dd_etl.lattice import Antichain, Time, less_equal
from dd_etl.trace.deferred import DeferredAppend
from dd_etl.trace.deferred_log import DeferredRecord
from dd_etl.trace.description import Description
from dd_etl.trace.errors import HoldRegression, UpperMismatch
from dd_etl.trace.reader_handle import ReaderHandle
from dd_etl.trace.spine import batch_limit
from dd_etl.trace.state import TraceState
from tests.support.model_storage import ModelTrace, Update, accumulate, model_trace


def e(x: int) -> Antichain:
    return Antichain.from_epoch(x)


def check_invariants(
    trace: ModelTrace, reference: list[Update], previous: TraceState | None
) -> None:
    state = trace.state
    state.check()
    # 1. descriptions admit every stored time
    for b in state.batches:
        for f in trace.files([b.id]):
            for _, t, _ in trace.storage.blobs[f.path]:
                assert b.description.admits(t), (b.description, t)
    # 3. monotone frontiers and holds
    if previous is not None:
        assert previous.upper.less_equal(state.upper)
        assert previous.since.less_equal(state.since)
        old = previous.hold_map
        for reader, hold in state.holds:
            if reader in old:
                assert old[reader].logical.less_equal(hold.logical)
                assert old[reader].physical.less_equal(hold.physical)
    for _, hold in state.holds:
        assert state.since.less_equal(hold.logical)
    # 2. compaction is invisible at every time in advance of since
    for t in grid(state.dims, 8):
        if state.since.less_equal_time(t):
            assert trace.read_at(t) == accumulate(reference, t), t
    assert trace.read_at(None) == accumulate(reference, None)


def grid(dims: int, size: int) -> list[Time]:
    return [tuple(t) for t in itertools.product(range(size), repeat=dims)]


def random_updates(draw: st.DrawFn, times: list[Time]) -> list[Update]:
    n = draw(st.integers(0, 6))
    return [
        (
            (draw(st.integers(0, 5)), draw(st.sampled_from(["a", "b", None]))),
            draw(st.sampled_from(times)),
            draw(st.sampled_from([1, 1, 2, -1])),
        )
        for _ in range(n)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([1, 2]))
def test_accumulation_survives_any_sequence_of_appends_merges_and_compactions(
    data: st.DataObject, dims: int
) -> None:
    trace = model_trace(dims=dims, rows_per_file=data.draw(st.integers(1, 4)))
    reference: list[Update] = []
    readers: list[ReaderHandle] = []
    registered = 0  # readers ever registered: a new one never reuses a live one's name
    upper_epoch = 0
    for _ in range(data.draw(st.integers(1, 12))):
        previous = trace.state
        op = data.draw(st.sampled_from(["append", "append", "exert", "hold", "hold", "drop"]))
        if op == "append" and upper_epoch < 6:
            new_upper = upper_epoch + data.draw(st.integers(1, 2))
            times = [
                (ep, *rest)
                for ep in range(upper_epoch, new_upper)
                for rest in itertools.product(range(3), repeat=dims - 1)
            ]
            updates = random_updates(data.draw, times)
            low = Antichain(((upper_epoch,) + (0,) * (dims - 1),))
            high = Antichain(((new_upper,) + (0,) * (dims - 1),))
            assert trace.compare_and_append(updates, low, high)
            reference += updates
            upper_epoch = new_upper
            # appending the same interval again is a no-op
            assert not trace.compare_and_append(updates, low, high)
        elif op == "exert":
            trace.exert(data.draw(st.one_of(st.none(), st.integers(1, 12))))
        elif op == "hold":
            if readers and data.draw(st.booleans()):
                reader = data.draw(st.sampled_from(readers))
                target = data.draw(st.sampled_from(grid(dims, 8)))
                logical = reader.hold.logical.join(Antichain((target,)))
                physical = reader.hold.physical.join(Antichain((target,)))
                reader.downgrade(logical, physical)
            else:
                readers.append(trace.open_reader(f"r{registered}"))
                registered += 1
        elif op == "drop" and readers:
            readers.pop(data.draw(st.integers(0, len(readers) - 1))).release()
        check_invariants(trace, reference, previous)
    trace.exert(None)
    check_invariants(trace, reference, None)
    assert not trace.state.merges and trace.state.next_merge() is None


def test_spine_holds_logarithmically_many_batches() -> None:
    trace = model_trace(rows_per_file=50)
    appended = 0
    for i in range(300):
        updates = [((i * 7 + j, "x"), (i,), 1) for j in range(1 + i % 5)]
        trace.compare_and_append(updates, e(i), e(i + 1))
        appended += len(updates)
        trace.exert(None)
        assert len(trace.state.batches) <= appended.bit_length() + 1
    assert trace.state.records == appended


def test_appends_apply_back_pressure_without_maintenance() -> None:
    trace = model_trace(rows_per_file=50)
    for i in range(400):
        trace.compare_and_append([((i, "x"), (i,), 1)], e(i), e(i + 1))
        assert len(trace.state.batches) <= batch_limit(trace.state.records) + 1
    assert trace.read_at(None) == {(i, "x"): 1 for i in range(400)}


def test_a_merge_spreads_over_fuelled_steps_while_readers_use_its_inputs() -> None:
    trace = model_trace(rows_per_file=3)
    reader = trace.open_reader("r")
    trace.compare_and_append([((k, "a"), (0,), 1) for k in range(40)], e(0), e(1))
    second = [((k, "a"), (1,), -1) for k in range(0, 40, 2)]
    second += [((k, "a"), (1,), 1) for k in range(100, 120)]
    trace.compare_and_append(second, e(1), e(2))
    reader.downgrade(e(1), e(2))
    expected = {(k, "a"): 1 for k in [*range(1, 40, 2), *range(100, 120)]}
    before = [b.id for b in trace.state.batches]
    steps = 0
    while True:
        spent = trace.exert(10)
        steps += 1
        if not trace.state.merges:
            break
        assert spent <= 10
        # inputs stay readable until the merged batch is committed
        assert [b.id for b in trace.state.batches] == before
        assert trace.read_at((1,)) == expected
    assert steps >= 5
    (merged,) = trace.state.batches
    assert merged.description.since == e(1)
    assert merged.records == 40  # the 20 retracted keys cancelled out at since {1}
    assert trace.read_at((1,)) == expected


def test_physical_hold_keeps_batch_boundaries() -> None:
    trace = model_trace()
    reader = trace.open_reader("r")  # holds physical {0}: no boundary may be merged away
    for i in range(4):
        trace.compare_and_append([((i, "x"), (i,), 1)], e(i), e(i + 1))
    trace.exert(None)
    assert len(trace.state.batches) == 4
    reader.downgrade(physical=e(2))
    trace.exert(None)
    # only the boundary at {1}, which the reader no longer needs, was merged away
    assert [b.description.upper for b in trace.state.batches] == [e(2), e(3), e(4)]
    reader.release()
    trace.exert(None)
    assert len(trace.state.batches) == 1


def test_compare_and_append_names_the_actual_upper() -> None:
    trace = model_trace()
    trace.compare_and_append([((1, "x"), (0,), 1)], e(0), e(2))
    with pytest.raises(UpperMismatch) as err:
        trace.compare_and_append([((1, "x"), (3,), 1)], e(3), e(4))
    assert err.value.actual == e(2)
    assert "{2}" in str(err.value)
    # an interval the trace already passed is a no-op, not an error
    assert not trace.compare_and_append([((1, "x"), (0,), 1)], e(0), e(1))
    assert trace.storage.txns["model"] == 2


def test_holds_only_move_forward_and_since_follows_their_meet() -> None:
    trace = model_trace()
    for i in range(5):
        trace.compare_and_append([((i, "x"), (i,), 1)], e(i), e(i + 1))
    assert trace.state.since == e(5)  # nobody reads: compaction may reach the upper
    late = trace.open_reader("late")
    assert late.hold.logical == e(5)
    trace.compare_and_append([((9, "x"), (5,), 1)], e(5), e(6))
    other = trace.open_reader("other", e(6))
    with pytest.raises(HoldRegression):
        other.downgrade(e(5))
    late.downgrade(e(7))
    assert trace.state.since == e(6)
    other.release()
    assert trace.state.since == e(7)


def test_product_times_compact_iterations_of_a_finished_epoch() -> None:
    trace = model_trace(dims=2)
    reader = trace.open_reader("r")
    # epoch 0 iterates three times, changing the same record back and forth
    updates = [
        ((1, "x"), (0, 0), 1),
        ((1, "x"), (0, 1), -1),
        ((1, "y"), (0, 1), 1),
        ((1, "y"), (0, 2), -1),
        ((1, "x"), (0, 2), 1),
    ]
    trace.compare_and_append(updates, Antichain.of((0, 0)), Antichain.of((1, 0)))
    # epoch 1 reaches its fixed point after two iterations; same spine level as epoch 0
    later = [((2, "z"), (1, 0), 1), ((2, "z"), (1, 1), 1), ((3, "w"), (1, 1), 1)]
    later += [((3, "w"), (1, 2), -1), ((4, "v"), (1, 2), 1)]
    trace.compare_and_append(later, Antichain.of((1, 0)), Antichain.of((2, 0)))
    reader.downgrade(Antichain.of((2, 0)), Antichain.of((2, 0)))
    trace.exert(None)
    # Epochs collapse, iterations stay distinct: future epochs still need to know
    # in which iteration each change happened, but not in which epoch.
    stored = trace.updates()
    assert {t for _, t, _ in stored} == {(2, 0), (2, 1), (2, 2)}
    assert sorted(u for u in stored if u[0][0] == 3) == [
        ((3, "w"), (2, 1), 1),
        ((3, "w"), (2, 2), -1),
    ]
    assert less_equal((2, 0), (2, 5))
    assert trace.read_at((2, 5)) == {(1, "x"): 1, (2, "z"): 2, (4, "v"): 1}
    assert trace.read_at((2, 1)) == {(1, "y"): 1, (2, "z"): 2, (3, "w"): 1}


def test_amortised_maintenance_keeps_the_spine_small_and_storage_near_live() -> None:
    """Upserts over a fixed key domain: history grows without bound, live data does
    not. With fuel enough for each record's O(log n) merges, old history keeps
    being compacted: the spine stays logarithmic and storage stays near live."""
    rng = random.Random(7)
    trace = model_trace(rows_per_file=10_000)
    reader = trace.open_reader("r")
    live: dict[int, int] = {}
    appended = 0
    for epoch in range(300):
        updates: list[Update] = []
        for _ in range(20):
            k = rng.randrange(300)
            if k in live:
                updates.append(((k, live[k]), (epoch,), -1))
            live[k] = rng.randrange(10**6)
            updates.append(((k, live[k]), (epoch,), 1))
        appended += len(updates)
        trace.compare_and_append(updates, e(epoch), e(epoch + 1))
        hold = e(max(0, epoch - 4))
        reader.downgrade(hold, hold)
        trace.exert(20 * len(updates))
        assert len(trace.state.batches) <= appended.bit_length() + 2
    assert trace.state.records <= 4 * len(live)
    assert trace.read_at(None) == {(k, v): 1 for k, v in live.items()}


def test_records_from_counts_every_batch_that_may_hold_later_times() -> None:
    """What a run reads to size its interval and to see that an input did not
    change: batches entirely before ``lower`` do not count, a batch reaching past
    it counts whole."""
    state = TraceState.new("t", 1, ("k",), "{}")
    for i, (lo, hi, records) in enumerate([(0, 2, 7), (2, 3, 0), (3, 5, 4)]):
        state = state.append(f"b{i}", Description(e(lo), e(hi), Antichain.minimum(1)), records)
    assert [state.records_from(e(t)) for t in (0, 2, 3, 4, 5)] == [11, 4, 4, 4, 0]


def test_a_generation_is_kept_by_every_transition_and_by_the_log() -> None:
    """A trace created again under its name is told apart from the old one by its
    generation, whatever was appended since; a state written before traces had
    one reads as having none (the store then takes its table's id for it)."""
    state = TraceState.new("t", 1, ("k",), "{}", "g1", {"sources": "{}"})
    state = state.append("b0", Description(e(0), e(1), Antichain.minimum(1)), 3)
    state = state.annotate({"plan": "p"}).register_reader("r", e(0), e(0))
    assert state.generation == "g1"
    assert state.meta_map == {"sources": "{}", "plan": "p"}
    assert TraceState.from_json(state.to_json()) == state
    written_before = json.loads(state.to_json())
    del written_before["generation"]
    assert TraceState.from_json(json.dumps(written_before)).generation == ""


def test_a_deferred_empty_append_is_read_as_appended_and_carried_by_the_next_commit() -> None:
    """A trace whose inputs did not change defers its empty append: read with the
    deferral, it is at the new upper, and its log is not; its next commit of any
    kind carries the empty batch. A deferral holds only for the log it was made
    from: once the log moved on, or for another generation, it applies to
    nothing."""
    trace = model_trace()
    trace.compare_and_append([((1, "x"), (0,), 1)], e(0), e(1))
    version = trace.snapshot.version
    deferred = trace.deferred_to(e(3))
    assert (deferred.lower, deferred.upper) == (e(1), e(3))
    assert trace.state.upper == e(3) and trace.snapshot.state.upper == e(1)
    assert trace.snapshot.version == version  # nothing committed
    check_invariants(trace, [((1, "x"), (0,), 1)], trace.snapshot.state)
    # read again, as another reader of the record would: the same state
    again = ModelTrace(trace.storage)
    again.defer(deferred)
    assert again.state == trace.state
    # deferred further from the same log: one longer empty batch, not two
    trace.deferred_to(e(4))
    assert [(b.description.lower, b.description.upper) for b in trace.state.batches] == [
        (e(0), e(1)),
        (e(1), e(4)),
    ]
    # the next append starts at the deferred upper; its commit carries the batch
    with pytest.raises(UpperMismatch):
        trace.compare_and_append([((2, "y"), (1,), 1)], e(1), e(5))
    trace.compare_and_append([((2, "y"), (4,), 1)], e(4), e(5))
    logged = trace.snapshot.state
    assert [(b.description.lower, b.description.upper, b.records) for b in logged.batches] == [
        (e(0), e(1), 1),
        (e(1), e(4), 0),
        (e(4), e(5), 1),
    ]
    assert trace.read_at(None) == {(1, "x"): 1, (2, "y"): 1}
    # stale now: the log moved on
    assert deferred.applied_to(logged) is logged
    assert deferred.holds_for(again.snapshot.state)
    assert not deferred.holds_for(replace(again.snapshot.state, generation="another"))


def test_a_record_of_deferrals_keeps_the_one_reaching_further_from_the_same_log() -> None:
    """Runs racing on one warehouse merge their deferrals into the latest record:
    from the same log state the further one stays; one from another log state
    (a later upper, another generation) replaces it; dropped ones go."""
    record = DeferredRecord(
        3, {"t": DeferredAppend("g", e(1), e(5)), "u": DeferredAppend("g", e(1), e(2))}
    )
    merged = record.with_appends(
        {"t": DeferredAppend("g", e(1), e(4)), "u": DeferredAppend("g", e(1), e(3))}, ()
    )
    assert (merged["t"].upper, merged["u"].upper) == (e(5), e(3))
    again = DeferredAppend("g2", e(0), e(2))
    assert record.with_appends({"t": again}, ["u"]) == {"t": again}
