"""A sink table's commit as dd_etl writes it into the Delta log: data files added
and removed, and the change files that say what the commit changed.

delta-rs's Python API commits add and remove actions only. A commit that puts a
view's rows in place of the table's then reads, in the table's change data feed,
as every old row deleted and every new row inserted; with the view's own changes
written beside it as change files (``cdc`` actions), readers of the feed (Spark,
delta-rs, another pipeline) take those instead, as the protocol says. So the log
entry is written here, by the put that only creates (``lake.objects.create``):
of two writers of one version exactly one wins, as with delta-rs.

Only tables whose settings this writer honours are written so (``writable``):
no column mapping, constraints, generated columns or deletion vectors, not
append-only; any other is Spark's to commit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata

from deltalake import DeltaTable

from dd_etl.lake import Location, objects

FEED = "delta.enableChangeDataFeed"
CHANGE_DATA = "_change_data"
"""Where change files live, beside the table's data files."""
DEFAULT_CHECKPOINT_INTERVAL = 100
"""Delta's and delta-rs's, for a table that sets none."""
CLIENT = f"dd_etl-{metadata.version('dd_etl')}"
KNOWN_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
    | {"columnMapping", "identityColumns", "timestampNtz"}
)
"""Writer features this writer knows: each is in use only where the table's
settings or columns say so, which ``writable`` reads. Any other (deletion
vectors, row tracking, in-commit timestamps, ...) asks for more than it writes."""
COLUMN_RULES = ("delta.invariants", "delta.generationExpression", "delta.identity.")
"""A column's metadata that sets a rule on the values written (legacy protocols
have no feature list to say so)."""


@dataclass(frozen=True)
class StoredFile:
    """A parquet file under the table, as a commit names it."""

    path: str  # relative to the table
    size: int
    records: int


@dataclass(frozen=True)
class Actions:
    """What one commit does: files added, removed and (change files) what changed."""

    added: Sequence[StoredFile]
    removed: Sequence[StoredFile]
    changed: Sequence[StoredFile]
    overwrite: bool


def writable(table: DeltaTable) -> bool:
    """Whether this writer keeps every rule the table's protocol and settings set."""
    protocol = table.protocol()
    if protocol.min_reader_version > 1:
        return False
    if not KNOWN_FEATURES.issuperset(protocol.writer_features or []):
        return False
    settings = table.metadata().configuration
    if settings.get("delta.appendOnly") == "true":
        return False
    if settings.get("delta.columnMapping.mode", "none") != "none":
        return False
    if any(k.startswith("delta.constraints.") for k in settings):
        return False
    fields = json.loads(table.schema().to_json())["fields"]
    return not any(k.startswith(COLUMN_RULES) for f in fields for k in f.get("metadata", {}))


def feed_on(table: DeltaTable) -> bool:
    return table.metadata().configuration.get(FEED) == "true"


def commit(
    where: Location,
    table: DeltaTable,
    actions: Actions,
    transaction: tuple[str, int],
    info: Mapping[str, str],
) -> bool:
    """Commit ``actions`` as the version after ``table``'s, with the application
    transaction ``(app id, version)`` and ``info`` in its commit info; whether it
    won the version (False: another writer committed it first)."""
    version = table.version() + 1
    now = int(time.time() * 1000)
    app_id, app_version = transaction
    lines: list[dict[str, object]] = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "WRITE",
                "operationParameters": {"mode": "Overwrite" if actions.overwrite else "Append"},
                "isBlindAppend": not actions.removed and not actions.overwrite,
                "clientVersion": CLIENT,
                **info,
            }
        },
        {"txn": {"appId": app_id, "version": app_version, "lastUpdated": now}},
    ]
    lines += [
        {
            "add": {
                "path": f.path,
                "partitionValues": {},
                "size": f.size,
                "modificationTime": now,
                "dataChange": True,
                "stats": json.dumps({"numRecords": f.records}),
            }
        }
        for f in actions.added
    ]
    lines += [
        {
            "remove": {
                "path": f.path,
                "deletionTimestamp": now,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": f.size,
            }
        }
        for f in actions.removed
    ]
    lines += [
        {"cdc": {"path": f.path, "partitionValues": {}, "size": f.size, "dataChange": False}}
        for f in actions.changed
    ]
    entry = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    if not objects.create(where / "_delta_log" / f"{version:020d}.json", entry.encode()):
        return False
    table.update_incremental()
    interval = int(
        table.metadata().configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL)
    )
    if version % interval == 0:
        table.create_checkpoint()
    return True
