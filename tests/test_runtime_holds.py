"""The runtime's holds on a trace, through its own handles, on the in-memory model:
what a run reads, and on a view's trace what keeps past epochs readable."""

from __future__ import annotations

from dd_etl.lattice import Antichain
from dd_etl.runtime.holds import RETENTION_READER, RUNTIME_READER, RuntimeHolds
from dd_etl.trace.holds import ReaderHold
from tests.support.model_storage import ModelTrace, model_trace


def e(x: int) -> Antichain:
    return Antichain.from_epoch(x)


def test_a_views_trace_is_held_whole_but_retention_holds_no_boundary() -> None:
    trace = model_trace()
    holds = RuntimeHolds.open(trace, retains=True)
    assert holds.retaining is not None
    assert holds.reading.hold == ReaderHold(e(0), e(0))
    assert holds.retaining.hold == ReaderHold(e(0), Antichain.empty())
    assert RuntimeHolds.open(model_trace(), retains=False).retaining is None


def test_retention_of_earlier_versions_lets_go_of_batch_boundaries() -> None:
    trace = model_trace()
    trace.open_reader(RUNTIME_READER, e(0), e(0))
    trace.open_reader(RETENTION_READER, e(0), e(0))  # as earlier versions registered it
    holds = RuntimeHolds.open(ModelTrace(trace.storage), retains=True)
    assert holds.retaining is not None
    assert holds.retaining.hold.physical.is_empty()


def test_released_moves_both_holds_forward_in_one_change() -> None:
    trace = model_trace()
    holds = RuntimeHolds.open(trace, retains=True)
    for i in range(5):
        trace.compare_and_append([((i, "x"), (i,), 1)], e(i), e(i + 1))
    version = trace.snapshot.version
    trace.move_holds(holds.released(e(4), keep=e(2)))
    assert trace.snapshot.version == version + 1
    assert trace.state.hold_map == {
        RUNTIME_READER: ReaderHold(e(4), e(4)),
        RETENTION_READER: ReaderHold(e(2), Antichain.empty()),
    }
    # never back; no ``keep`` leaves retention where it is
    trace.move_holds(holds.released(e(3), keep=None))
    assert holds.reading.hold == ReaderHold(e(4), e(4))
    assert holds.retaining is not None and holds.retaining.hold.logical == e(2)
    holds.restart(e(5))
    assert trace.state.since == e(5)
