"""How a view is brought up to date: incrementally, by a full recompute, or
whichever the size of the change favours.

Incremental maintenance costs work in proportion to the change (plus the history
it touches); a recompute costs work in proportion to the data. When a change is
a large part of the data (a backfill, a restated table) the recompute is the
cheaper of the two, and ``auto`` takes it. The choice is a pure function of
record counts the trace logs already hold, so it needs no Spark job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["incremental", "full"]
Policy = Literal["auto", "incremental", "full", "strict"]
POLICIES: tuple[Policy, ...] = ("auto", "incremental", "full", "strict")
DEFAULT_FULL_ABOVE = 0.5
"""``auto`` recomputes when the pending change exceeds this share of the data."""


@dataclass(frozen=True)
class RefreshPolicy:
    """``incremental`` (the default) never recomputes; ``full`` always does;
    ``auto`` recomputes when the change exceeds ``full_above`` of the data;
    ``strict`` is ``incremental`` that is never rebuilt unasked: a run refuses
    to go on when its definition changed, until ``dd-etl rebuild`` says so."""

    policy: Policy = "incremental"
    full_above: float = DEFAULT_FULL_ABOVE

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"refresh {self.policy!r} is not one of {', '.join(POLICIES)}")
        if not self.full_above > 0:
            raise ValueError(f"full_above must be positive, not {self.full_above}")

    def describe(self) -> str:
        if self.policy == "full":
            return "full: recomputed every epoch; no operator state is kept"
        if self.policy == "auto":
            return (
                f"auto: recomputed when the changed source records exceed "
                f"{self.full_above:.0%} of those held, else maintained incrementally"
            )
        if self.policy == "strict":
            return "strict: maintained from the changes; a changed definition waits for a rebuild"
        return "incremental: maintained from the changes, never recomputed"


@dataclass(frozen=True)
class RefreshChoice:
    """What a run did for one view, and why (logged and reported)."""

    view: str
    policy: Policy
    mode: Mode
    reason: str
    change_records: int
    data_records: int

    def __str__(self) -> str:
        return f"{self.mode} ({self.reason})"


def choose(
    view: str,
    policy: RefreshPolicy,
    change_records: int,
    data_records: int,
    first_build: bool,
) -> RefreshChoice:
    """``change_records``: source records in the epochs the view has pending;
    ``data_records``: source records before them; ``first_build``: the view holds
    no epoch yet (an incremental first build also builds the state later epochs
    need, which a recompute would not)."""

    def chosen(mode: Mode, reason: str) -> RefreshChoice:
        return RefreshChoice(view, policy.policy, mode, reason, change_records, data_records)

    if policy.policy == "strict":
        return chosen("incremental", "refresh: strict")
    if policy.policy != "auto":
        return chosen(policy.policy, f"refresh: {policy.policy}")
    if first_build:
        return chosen("incremental", "first build: builds the state later epochs reuse")
    share = change_records / data_records if data_records else float("inf")
    sizes = f"{change_records:,} changed source records against {data_records:,}"
    if share > policy.full_above:
        return chosen("full", f"{sizes}, above the {policy.full_above:.0%} threshold")
    return chosen("incremental", f"{sizes}, within the {policy.full_above:.0%} threshold")
