"""Named points where a test can make this process die, to prove crash safety.

``DD_ETL_FAILPOINTS="append.files_written=3,merge.step_committed=1"`` kills the
process with SIGKILL the 3rd time it passes ``append.files_written`` and the 1st
time it passes ``merge.step_committed``. Unset, a failpoint costs a dict lookup.
"""

from __future__ import annotations

import os
import signal

_ENV = "DD_ETL_FAILPOINTS"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, count = item.partition("=")
        points[name] = int(count or "1")
    return points


_armed = _parse(os.environ.get(_ENV, ""))
_hits: dict[str, int] = {}


def rearm() -> None:
    """Arm the failpoints ``DD_ETL_FAILPOINTS`` names now, counting from zero: for a
    process that runs many commands, each with its caller's environment."""
    global _armed
    _armed = _parse(os.environ.get(_ENV, ""))
    _hits.clear()


def failpoint(name: str) -> None:
    if not _armed or name not in _armed:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] >= _armed[name]:
        os.kill(os.getpid(), signal.SIGKILL)
