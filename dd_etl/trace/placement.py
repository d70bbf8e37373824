"""Where the reads and writes of a trace run for one interval.

The runtime decides it once per interval (and per layer of its dataflow) from the
interval's size and the size of the state it touches, and passes it to every read
and append it makes: a trace holds no mode of its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    name: str
    driver: bool
    """The interval's rows are few enough for the driver: reads of few records are
    made there, and every read is one partition, so a plan over such reads runs as
    one stage without an exchange; a batch of unknown size is collected and written
    by the driver (past a million records by one Spark task)."""
    broadcast_keys: bool
    """A lookup hands its keys to every task: the keys follow the change, the
    history they are looked up in the state, so the history is read where it lies
    and never shuffled."""


DRIVER = Placement("driver", driver=True, broadcast_keys=False)
"""A small interval: its rows pass through the driver."""
LOOKUPS = Placement("lookups", driver=False, broadcast_keys=True)
"""An interval small beside the state it touches: Spark's executors read and
write, and every lookup reads the history of the change's keys."""
BULK = Placement("bulk", driver=False, broadcast_keys=False)
"""An interval as large as its state (a load, a backfill): Spark joins whole inputs."""
