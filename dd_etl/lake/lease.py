"""A lease on an object store: one holder at a time among processes that share
nothing but the store, and none for long after a holder died.

The lease is a sequence of objects ``<generation>.json``, each created with a
create-only put, so of two processes that try to write the same generation
exactly one succeeds. The newest generation says who holds the lease and until
when. Taking it over, renewing it and releasing it all write the next
generation: a holder that was taken over from (it failed to renew in time)
finds its renewal refused and knows it lost the lease. A killed holder stops
renewing, and the lease is free once its term is over, or at once for a process
that can see the holder has ended (Linux: the same boot and the same process-id
namespace, so not another container's, and no process with the holder's id and
start time).

Terms are judged by the clocks of the machines involved: they must agree to
within a small part of a term (as NTP keeps them).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from dd_etl.errors import PipelineError
from dd_etl.lake import objects
from dd_etl.lake.location import Location

TERM_SECONDS = 60.0
"""How long a lease lasts unless renewed; a holder renews it every third of it."""
KEPT_GENERATIONS = 2
"""Generations left behind a new one (older ones are deleted): enough to read the
newest while another process writes the next."""


class LeaseHeld(PipelineError):
    def __init__(self, holder: str, seconds_left: float) -> None:
        super().__init__(f"{holder}, for {seconds_left:.0f} s more unless renewed")
        self.holder = holder


@dataclass(frozen=True)
class Process:
    """A process, told apart from every other one: a machine's boot, the namespace
    its id is in (containers on one machine share the boot, not the namespace),
    and its id with its start time (an id is reused, the pair is not)."""

    boot: str
    namespace: str
    pid: int
    started: int

    @staticmethod
    def this() -> Process | None:
        return Process.on_this_machine(os.getpid())

    @staticmethod
    def on_this_machine(pid: int) -> Process | None:
        """Process ``pid`` of this machine; None when it is not running (or a zombie)
        or this system does not say (no ``/proc``)."""
        try:
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
            namespace = os.readlink("/proc/self/ns/pid")
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        state, started = stat[0], int(stat[19])  # fields 3 and 22 of proc(5)
        return None if state == "Z" else Process(boot, namespace, pid, started)

    @staticmethod
    def written(fields: object) -> Process | None:
        """The process a term names; None for a term that names none as this
        version writes it (its term alone then says when it ends)."""
        if not isinstance(fields, dict) or set(fields) != {"boot", "namespace", "pid", "started"}:
            return None
        return Process(**fields)

    def ended(self) -> bool:
        """Whether this process can tell that the process has ended."""
        here = Process.this()
        if here is None or (here.boot, here.namespace) != (self.boot, self.namespace):
            return False  # another machine's or container's, or from before a reboot
        return Process.on_this_machine(self.pid) != self


@dataclass(frozen=True)
class Term:
    holder: str
    expires: float
    generation: int
    process: Process | None = None

    def free(self, now: float) -> bool:
        return self.expires <= now or (self.process is not None and self.process.ended())


class Lease:
    def __init__(
        self,
        where: Location,
        seconds: float = TERM_SECONDS,
        clock: Callable[[], float] = time.time,
        holder: str | None = None,
    ) -> None:
        self.where = where
        self.seconds = seconds
        self.clock = clock
        self.holder = holder or f"process {os.getpid()} on {socket.gethostname()}"
        self.token = uuid.uuid4().hex
        """Tells this process's generations from another's with the same holder."""
        self.generation: int | None = None
        """The generation this process wrote last, while it holds the lease."""

    def acquire(self) -> None:
        """Take the lease, or raise ``LeaseHeld`` naming who has it."""
        while True:
            current = self.current()
            now = self.clock()
            if current is not None and not current.free(now):
                raise LeaseHeld(current.holder, current.expires - now)
            following = 0 if current is None else current.generation + 1
            if self._write(following, now + self.seconds):
                self._forget_before(following - KEPT_GENERATIONS)
                return
            # another process wrote that generation first: look at what it says

    def renew(self) -> bool:
        """Extend the term; False when the lease was taken over meanwhile."""
        if self.generation is None:
            return False
        return self._write(self.generation + 1, self.clock() + self.seconds)

    def release(self) -> None:
        """Free the lease at once (a no-op when it was taken over)."""
        if self.generation is not None:
            self._write(self.generation + 1, 0.0)
            self.generation = None

    def current(self) -> Term | None:
        """The newest term written, None when there never was one."""
        generations = sorted(
            int(o.name.removesuffix(".json"))
            for o in objects.listing(self.where)
            if o.name.endswith(".json") and o.name.removesuffix(".json").isdigit()
        )
        for generation in reversed(generations):
            data = objects.read(self._at(generation))
            if data is not None:  # else deleted as we listed: an older one is newest
                written = json.loads(data)
                return Term(
                    written["holder"],
                    float(written["expires"]),
                    generation,
                    Process.written(written.get("process")),
                )
        return None

    def _write(self, generation: int, expires: float) -> bool:
        """Whether this process wrote ``generation``. A put whose answer was lost
        (a timeout, a reset connection) may have been stored: what is there says."""
        at = self._at(generation)
        process = Process.this()
        text = json.dumps(
            {
                "holder": self.holder,
                "token": self.token,
                "expires": expires,
                "process": None if process is None else asdict(process),
            }
        )
        try:
            created = objects.create(at, text.encode())
        except Exception:  # the outcome is unknown, not failed
            created = False
        if not created:
            there = objects.read(at)
            created = there is not None and json.loads(there).get("token") == self.token
        self.generation = generation if created else None
        return created

    def _forget_before(self, generation: int) -> None:
        for o in list(objects.listing(self.where)):
            stem = o.name.removesuffix(".json")
            if stem.isdigit() and int(stem) < generation:
                objects.delete(self.where / o.name)

    def _at(self, generation: int) -> Location:
        return self.where / f"{generation:020d}.json"


class KeptLease:
    """A lease held while a block runs, renewed in the background every third of
    its term; ``lost`` tells whether a renewal was refused."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="lease", daemon=True)

    def __enter__(self) -> KeptLease:
        self.lease.acquire()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if not self.lost:
            self.lease.release()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease.seconds / 3):
            try:
                renewed = self.lease.renew()
            except OSError:
                continue  # the store did not answer: try again before the term ends
            if not renewed:
                self.lost = True
                return
