"""Named points where a test can make this process die, to prove crash safety.

``DD_ETL_FAILPOINTS="append.files_written=3,merge.step_committed=1"`` kills the
process with SIGKILL the 3rd time it passes ``append.files_written`` and the 1st
time it passes ``merge.step_committed``. ``tick.sources_appended=1:pause`` holds
the thread that passes there instead (for ``PAUSE_SECONDS``), so a test can act
while a command is in flight and then kill its process. Unset, a failpoint
costs a dict lookup.
"""

from __future__ import annotations

import os
import signal
import time

_ENV = "DD_ETL_FAILPOINTS"
_PAUSE = ":pause"
PAUSE_SECONDS = 600.0


def parse_spec(spec: str) -> dict[str, tuple[int, bool]]:
    """Per failpoint: the hit that acts, and whether it pauses (else it kills)."""
    points: dict[str, tuple[int, bool]] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, count = item.partition("=")
        pause = count.endswith(_PAUSE)
        points[name] = (int(count.removesuffix(_PAUSE) or "1"), pause)
    return points


_armed = parse_spec(os.environ.get(_ENV, ""))
_hits: dict[str, int] = {}


def rearm() -> None:
    """Arm the failpoints ``DD_ETL_FAILPOINTS`` names now, counting from zero: for a
    process that runs many commands, each with its caller's environment."""
    global _armed
    _armed = parse_spec(os.environ.get(_ENV, ""))
    _hits.clear()


def failpoint(name: str) -> None:
    if not _armed or name not in _armed:
        return
    _hits[name] = _hits.get(name, 0) + 1
    hit, pause = _armed[name]
    if _hits[name] >= hit:
        if pause:
            time.sleep(PAUSE_SECONDS)
        else:
            os.kill(os.getpid(), signal.SIGKILL)
