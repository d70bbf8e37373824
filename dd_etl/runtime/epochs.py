"""Frontiers of epoch-timed traces, read as the next epoch they will take."""

from __future__ import annotations

from dd_etl.lattice import Antichain
from dd_etl.plan.dataflow import PlanError


def epoch_of(frontier: Antichain) -> int:
    bound = frontier.epoch_bound()
    if bound is None:
        raise PlanError("a complete (empty) frontier has no next epoch")
    return bound
