"""Delta file statistics for batch files: record counts and the ranges readers prune by.

Only integer columns we control (key hash and times) get min/max values, so the
statistics are exact and never depend on how a data type is rendered in JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from dd_etl.trace.batch import DataFile
from dd_etl.trace.columns import KEY_HASH


def make_stats(records: int, mins: Mapping[str, int], maxs: Mapping[str, int]) -> str:
    return json.dumps(
        {
            "numRecords": records,
            "minValues": dict(mins),
            "maxValues": dict(maxs),
            "nullCount": {c: 0 for c in mins},
        },
        sort_keys=True,
    )


def column_bounds(file: DataFile, column: str) -> tuple[int, int] | None:
    stats = json.loads(file.stats)
    lo = stats.get("minValues", {}).get(column)
    hi = stats.get("maxValues", {}).get(column)
    if lo is None or hi is None:
        return None
    return int(lo), int(hi)


def hash_bounds(file: DataFile) -> tuple[int, int] | None:
    return column_bounds(file, KEY_HASH)
