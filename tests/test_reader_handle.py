"""Reader holds are moved by their readers' handles only, on the in-memory model:
each reader moves its own hold, forward only, until it releases it; a reader
opened again (a new process) adopts the hold it persisted."""

from __future__ import annotations

import pytest

from dd_etl.lattice import Antichain
from dd_etl.trace.errors import HoldRegression, ReaderInUse, ReleasedReader, UnknownReader
from dd_etl.trace.holds import ReaderHold
from tests.support.model_storage import ModelTrace, model_trace


def e(x: int) -> Antichain:
    return Antichain.from_epoch(x)


def appended(trace: ModelTrace, epochs: int) -> ModelTrace:
    for i in range(epochs):
        trace.compare_and_append([((i, "x"), (i,), 1)], e(i), e(i + 1))
    return trace


def test_a_released_handle_refuses_to_move_or_show_its_hold() -> None:
    trace = model_trace()
    reader = trace.open_reader("r", e(0), e(0))
    pending = reader.downgraded(e(1), e(1))
    reader.release()
    assert reader.released
    assert "r" not in trace.state.hold_map
    with pytest.raises(ReleasedReader, match="reader 'r' released its hold"):
        reader.downgrade(e(1))
    for use in (
        lambda: reader.hold,
        lambda: reader.downgraded(e(1)),
        lambda: reader.advanced(e(1)),
        reader.release,
    ):
        with pytest.raises(ReleasedReader):
            use()
    # a change made before the release is refused when it would be committed
    with pytest.raises(ReleasedReader):
        trace.compare_and_append([((1, "x"), (0,), 1)], e(0), e(1), holds=pending)
    assert trace.state.upper == e(0)


def test_handles_of_different_readers_move_independently() -> None:
    trace = model_trace()
    first = trace.open_reader("first", e(1), e(1))
    second = trace.open_reader("second", e(2), e(2))
    appended(trace, 4)
    first.downgrade(e(3))
    assert first.hold == ReaderHold(e(3), e(1))
    assert second.hold == ReaderHold(e(2), e(2))
    assert trace.state.since == e(2)  # the meet of the logical holds
    second.downgrade(physical=e(4))
    assert first.hold == ReaderHold(e(3), e(1))
    first.release()
    assert second.hold == ReaderHold(e(2), e(4))
    assert set(trace.state.hold_map) == {"second"}


def test_a_reader_opened_again_adopts_its_persisted_hold() -> None:
    trace = model_trace()
    trace.open_reader("r", e(1), e(1)).downgrade(e(3), e(2))
    appended(trace, 4)
    version = trace.snapshot.version
    # a new process of the same reader: its frontiers ask for less than it holds
    reopened = ModelTrace(trace.storage).open_reader("r", e(0), e(0))
    assert reopened.hold == ReaderHold(e(3), e(2))
    assert trace.storage.load().version == version  # nothing committed
    reopened.downgrade(e(4), e(4))
    assert trace.reload().hold_map["r"] == ReaderHold(e(4), e(4))


def test_one_trace_object_opens_a_reader_once_until_it_is_released() -> None:
    trace = appended(model_trace(), 2)
    reader = trace.open_reader("r")
    with pytest.raises(ReaderInUse, match="reader 'r' is open already"):
        trace.open_reader("r")
    reader.release()
    again = trace.open_reader("r", e(0))
    assert again.hold.logical == e(2)  # registered anew: no earlier than the since


def test_holds_only_move_forward() -> None:
    trace = model_trace()
    reader = trace.open_reader("r", e(2), e(2))
    appended(trace, 4)
    with pytest.raises(HoldRegression, match="may not move its logical hold back"):
        reader.downgrade(e(1))
    with pytest.raises(HoldRegression, match="physical"):
        trace.move_holds(reader.downgraded(physical=e(1)))
    assert reader.hold == ReaderHold(e(2), e(2))
    # ``advanced`` moves to the join: a frontier behind the hold leaves it where it is
    trace.move_holds(reader.advanced(e(1), e(3)))
    assert reader.hold == ReaderHold(e(2), e(3))


def test_a_hold_moves_within_an_append() -> None:
    trace = model_trace()
    reader = trace.open_reader("r", e(0), e(0))
    other = trace.open_reader("other", e(0), e(0))
    version = trace.snapshot.version
    both = reader.advanced(e(1), e(1))
    assert trace.compare_and_append(
        [((1, "x"), (0,), 1)], e(0), e(1), holds=lambda s: other.downgraded(e(1))(both(s))
    )
    assert trace.snapshot.version == version + 1
    assert reader.hold == ReaderHold(e(1), e(1))
    assert other.hold == ReaderHold(e(1), e(0))


def test_a_hold_dropped_elsewhere_is_unknown_to_its_handle() -> None:
    trace = model_trace()
    reader = trace.open_reader("r")
    ModelTrace(trace.storage).open_reader("r").release()
    trace.reload()
    with pytest.raises(UnknownReader, match="no reader named 'r'"):
        _ = reader.hold
