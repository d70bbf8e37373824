"""A deterministic workload over one trace, run in a child process that tests kill.

Re-running it after a crash must finish the work exactly once: appends of
intervals already committed are no-ops, merges resume from their last step.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from dd_etl.lattice import Antichain
from dd_etl.trace.delta_trace import DeltaTrace
from tests.support.child_process import main
from tests.support.kv_trace import SCHEMA, frame
from tests.support.model_storage import Update

EPOCHS = 6


def epoch_updates(epoch: int) -> list[Update]:
    """Inserts of new keys and retractions of some keys of the previous epoch."""
    inserts = [((epoch * 4 + j, f"e{epoch}"), (epoch,), 1) for j in range(4)]
    retracts = [(((epoch - 1) * 4 + j, f"e{epoch - 1}"), (epoch,), -1) for j in (0, 3)]
    return inserts + (retracts if epoch else [])


def expected_updates(epochs: int) -> list[Update]:
    return [u for epoch in range(epochs) for u in epoch_updates(epoch)]


def run(spark: SparkSession, uri: str, epochs: int = EPOCHS) -> DeltaTrace:
    trace = DeltaTrace.create(spark, uri, "crash", SCHEMA, ["k"], rows_per_file=3)
    reader = trace.open_reader("reader")
    for epoch in range(epochs):
        trace.compare_and_append(
            frame(spark, epoch_updates(epoch)),
            Antichain.from_epoch(epoch),
            Antichain.from_epoch(epoch + 1),
        )
        hold = reader.hold.logical.join(Antichain.from_epoch(max(0, epoch - 1)))
        reader.downgrade(hold, hold)
        trace.exert(5)
    trace.exert(None)
    return trace


if __name__ == "__main__":
    main("dd_etl-crash", lambda spark: run(spark, sys.argv[1]))
