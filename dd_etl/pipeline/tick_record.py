"""The record a tick leaves behind: which epoch the pipeline last finished, and when,
and what the last tick run cost (its profile, kept even if it did not finish).

Each is one small JSON file under the warehouse, replaced atomically. The record
distinguishes a tick that crashed (sources ahead of the last completed epoch:
the re-run completes that epoch) from a finished one (the run starts a new epoch).
Running a tick is ``tick.py``; this module only reads and writes its record.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from dd_etl.lake import Location
from dd_etl.lake.documents import read_document, replace_document
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


def last_tick(warehouse: Location) -> TickRecord | None:
    text = read_document(warehouse / TICKS_FILE)
    return None if text is None else TickRecord(**json.loads(text))


def record_tick(warehouse: Location, record: TickRecord) -> None:
    replace_document(warehouse / TICKS_FILE, json.dumps(record.to_json(), indent=2))


def last_profile(warehouse: Location) -> dict[str, Any] | None:
    """The profile of the last tick run, finished or not: ``epoch`` and ``profile``."""
    text = read_document(warehouse / PROFILE_FILE)
    if text is None:
        return None
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def record_profile(warehouse: Location, epoch: int, profile: RunProfile) -> None:
    content = {"epoch": epoch, "profile": profile.to_json()}
    replace_document(warehouse / PROFILE_FILE, json.dumps(content, indent=2))
