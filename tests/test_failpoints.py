"""The failpoint spec the crash tests write: which hit acts, and how."""

from __future__ import annotations

from dd_etl.failpoints import parse_spec


def test_a_failpoint_kills_at_its_hit_or_pauses_there() -> None:
    spec = "append.committed=3, tick.sources_appended=1:pause,merge.step_committed"
    assert parse_spec(spec) == {
        "append.committed": (3, False),
        "tick.sources_appended": (1, True),
        "merge.step_committed": (1, False),
    }
    assert parse_spec("") == {}
