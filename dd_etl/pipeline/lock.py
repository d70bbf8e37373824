"""One tick at a time per pipeline, whoever starts it (the CLI, a Dagster run), on
whichever machine.

Ticks are idempotent, so two at once would not corrupt anything (every commit
is compare-and-set), but they would race for the same epoch and do its work
twice. On a local disk an advisory ``flock`` on a file in the warehouse is
released by the kernel when its holder dies, so a killed tick never leaves the
pipeline locked. On an object store, where processes on machines that share
nothing but the store cannot ``flock``, the lock is a lease (``lake/lease.py``):
renewed while the tick runs, free at most a term (a minute) after its holder
died. Maintenance does not take it: merging and vacuuming never block ticks.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dd_etl.errors import PipelineError
from dd_etl.lake.lease import KeptLease, Lease, LeaseHeld
from dd_etl.lake.probe import probe

if TYPE_CHECKING:
    from dd_etl.lake import Location
    from dd_etl.pipeline.build import Pipeline

LOCK_FILE = "_pipeline/tick.lock"
LEASE = "_pipeline/tick.lease"


class TickRunning(PipelineError):
    def __init__(self, pipeline: str, holder: str) -> None:
        super().__init__(
            f"another tick of pipeline {pipeline!r} is running ({holder}); "
            "wait for it to finish, then run again"
        )


@contextmanager
def tick_lock(pipeline: Pipeline) -> Iterator[None]:
    warehouse = pipeline.warehouse
    if warehouse.is_local:
        with _flocked(pipeline.name, warehouse):
            yield
        return
    probe(warehouse, pipeline.loaded.config.allow_unsafe_store)
    try:
        with KeptLease(Lease(warehouse / LEASE)):
            yield
    except LeaseHeld as e:
        raise TickRunning(pipeline.name, str(e)) from None


@contextmanager
def _flocked(pipeline: str, warehouse: Location) -> Iterator[None]:
    path = warehouse.path / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
            raise TickRunning(pipeline, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {os.uname().nodename}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock
