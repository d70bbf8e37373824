"""Auditing a trace from its Delta log alone (no Spark): the structural invariants
of its current state, and that its frontiers only moved forward (invariants 1
and 3 of ARCHITECTURE.md).

Every commit carries the trace's whole state, so the log's recent commits are
the trace's recent history; a state that fails ``check`` or a frontier that went
back is a bug somewhere in dd_etl, reported rather than raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from dd_etl.errors import InvariantViolation
from dd_etl.lake import Where, as_location
from dd_etl.trace import delta_log
from dd_etl.trace.state import TraceState

RECENT_COMMITS = 50


@dataclass
class TraceAudit:
    trace: str
    commits: int  # states looked at
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def frontier_problems(states: Sequence[TraceState]) -> list[str]:
    """Where ``upper``, ``since`` or a reader hold moved back, oldest state first."""
    problems = []
    for before, after in pairwise(states):
        for what, old, new in (
            ("upper", before.upper, after.upper),
            ("since", before.since, after.since),
        ):
            if not old.less_equal(new):
                problems.append(f"{what} went back from {old!r} to {new!r}")
        held = after.hold_map
        for reader, hold in before.holds:
            if reader in held and not hold.logical.less_equal(held[reader].logical):
                problems.append(
                    f"reader {reader}'s hold went back from {hold.logical!r} "
                    f"to {held[reader].logical!r}"
                )
    return problems


def audit(where: Where, commits: int = RECENT_COMMITS) -> TraceAudit:
    where = as_location(where)
    table = delta_log.open_table(where)
    states = [
        TraceState.from_json(entry[delta_log.STATE_KEY])
        for entry in reversed(table.history(commits))
        if delta_log.STATE_KEY in entry
    ]
    report = TraceAudit(states[-1].name if states else where.uri, len(states))
    if not states:
        report.problems.append("no dd_etl state in the recent commits")
        return report
    try:
        states[-1].check()
    except InvariantViolation as e:
        report.problems.append(f"{e.invariant} does not hold: {e.evidence}")
    report.problems.extend(frontier_problems(states))
    return report
