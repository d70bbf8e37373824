"""Named points where a test can make this process die, to prove crash safety.

``DD_ETL_FAILPOINTS="append.files_written=3,merge.step_committed=1"`` kills the
process with SIGKILL the 3rd time it passes ``append.files_written`` and the 1st
time it passes ``merge.step_committed``. ``tick.sources_appended=1:pause`` holds
the thread that passes there instead (for ``PAUSE_SECONDS``), so a test can act
while a command is in flight and then kill its process. ``layers/1.job=1:oom``
raises the error Spark raises when its tasks run out of memory, there, at the
1st hit; ``=1+:oom`` at the 1st hit and every one after. Unset, a failpoint
costs a dict lookup.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Literal

_ENV = "DD_ETL_FAILPOINTS"
PAUSE_SECONDS = 600.0
Action = Literal["kill", "pause", "oom"]
_ACTIONS: tuple[Action, ...] = ("kill", "pause", "oom")


@dataclass(frozen=True)
class Armed:
    """What a failpoint does, and at which of its hits."""

    hit: int
    action: Action = "kill"
    onwards: bool = False
    """At every hit from ``hit`` on, not only that one."""


def parse_spec(spec: str) -> dict[str, Armed]:
    """Per failpoint: the hit that acts, and how."""
    points: dict[str, Armed] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, count = item.partition("=")
        count, _, action = count.partition(":")
        onwards = count.endswith("+")
        chosen = next((a for a in _ACTIONS if a == (action or "kill")), None)
        if chosen is None:
            raise ValueError(f"{_ENV}: unknown action {action!r} of {name!r}; use {_ACTIONS}")
        points[name] = Armed(int(count.removesuffix("+") or "1"), chosen, onwards)
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
    armed = _armed[name]
    if _hits[name] < armed.hit or (_hits[name] > armed.hit and not armed.onwards):
        return
    if armed.action == "pause":
        time.sleep(PAUSE_SECONDS)
    elif armed.action == "oom":
        from pyspark.errors import PySparkException

        raise PySparkException(
            message=f"[AGGREGATE_OUT_OF_MEMORY] SparkOutOfMemoryError at failpoint {name}"
        )
    else:
        os.kill(os.getpid(), signal.SIGKILL)
