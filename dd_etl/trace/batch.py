"""Batches as the spine sees them: a description and a size.

The updates themselves live in files named under ``data/<batch id>/``; the spine
only needs how many records a batch holds, which places it on a level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_etl.trace.description import Description


@dataclass(frozen=True, slots=True)
class Batch:
    id: str
    description: Description
    records: int

    @property
    def level(self) -> int:
        """The spine level: ⌈log2(records + 1)⌉, 0 when empty. It follows the
        batch's size after consolidation, so a batch that compaction shrank
        merges as soon as newer history grows to match it."""
        return self.records.bit_length()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "description": self.description.to_json(),
            "records": self.records,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Batch:
        return cls(
            value["id"],
            Description.from_json(value["description"]),
            int(value["records"]),
        )


@dataclass(frozen=True, slots=True)
class DataFile:
    """A parquet file of a batch, with what the Delta log needs to know about it."""

    path: str  # relative to the trace root
    size: int
    records: int
    stats: str  # Delta file statistics (JSON)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "records": self.records, "stats": self.stats}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> DataFile:
        return cls(value["path"], int(value["size"]), int(value["records"]), value["stats"])


@dataclass(frozen=True, slots=True)
class WrittenBatch:
    """A batch's files, written and not yet committed: written for several traces
    at once, each then commits its own (``Trace.append_written``)."""

    id: str
    files: tuple[DataFile, ...]


def batch_dir(batch_id: str) -> str:
    return f"data/{batch_id}"


def batch_id_of_path(path: str) -> str:
    """The batch a data file belongs to, from its path ``data/<batch id>/…``."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "data":
        raise ValueError(f"not a batch data file: {path}")
    return parts[1]
