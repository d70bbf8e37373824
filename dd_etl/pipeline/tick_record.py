"""The record a tick leaves behind: which epoch the pipeline last finished, and when,
and what the last tick run cost (its profile, kept even if it did not finish).

Each is one small JSON file under the warehouse, replaced atomically. The record
distinguishes a tick that crashed (sources ahead of the last completed epoch:
the re-run completes that epoch) from a finished one (the run starts a new epoch).
Running a tick is ``tick.py``; this module only reads and writes its record.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dd_etl.profiling import RunProfile

TICKS_FILE = "_pipeline/last_tick.json"
PROFILE_FILE = "_pipeline/last_profile.json"


@dataclass(frozen=True)
class TickRecord:
    epoch: int
    started_at: float
    finished_at: float
    sources: dict[str, str] = field(default_factory=dict)  # what each source's epoch covered
    views: dict[str, int] = field(default_factory=dict)  # change records written per view

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def last_tick(warehouse: Path) -> TickRecord | None:
    path = warehouse / TICKS_FILE
    if not path.exists():
        return None
    return TickRecord(**json.loads(path.read_text()))


def record_tick(warehouse: Path, record: TickRecord) -> None:
    _replace(warehouse / TICKS_FILE, record.to_json())


def last_profile(warehouse: Path) -> dict[str, Any] | None:
    """The profile of the last tick run, finished or not: ``epoch`` and ``profile``."""
    path = warehouse / PROFILE_FILE
    if not path.exists():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def record_profile(warehouse: Path, epoch: int, profile: RunProfile) -> None:
    _replace(warehouse / PROFILE_FILE, {"epoch": epoch, "profile": profile.to_json()})


def _replace(path: Path, content: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(content, indent=2))
    os.replace(temporary, path)
