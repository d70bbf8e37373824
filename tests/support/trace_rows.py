"""A view's rows as any Delta reader finds them in its trace (delta-rs, no Spark): the
updates of the table's current files summed per row. Cheap enough to check every
view after every step of a long test, and independent of dd_etl's own reads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

RESERVED = ("_key_hash", "_time", "_diff")


def view_contents(warehouse: Path, view: str) -> Counter[str]:
    """Each row of ``view`` (JSON, keys sorted) counted by its multiplicity."""
    rows = DeltaTable(str(warehouse / "views" / view)).to_pyarrow_table().to_pylist()
    counts: Counter[str] = Counter()
    for row in rows:
        diff = row["_diff"]
        data = {k: v for k, v in row.items() if k not in RESERVED}
        counts[json.dumps(data, sort_keys=True, default=str)] += diff
    assert not -counts, f"view {view} has negative multiplicities: {-counts}"
    return +counts


def delta_rs_feed(table: Path, version: int) -> Counter[tuple[str, int]]:
    """A Delta table version's change feed as delta-rs reads it: each row (JSON, keys
    sorted) with its sign, +1 inserted, -1 deleted, counted."""
    got: Counter[tuple[str, int]] = Counter()
    for batch in DeltaTable(str(table)).load_cdf(starting_version=version, ending_version=version):
        for r in pa.table(batch).to_pylist():
            row = {k: v for k, v in r.items() if not k.startswith("_")}
            sign = 1 if r["_change_type"] == "insert" else -1
            got[json.dumps(row, sort_keys=True, default=str), sign] += 1
    return got


def changes_between(before: Counter[str], after: Counter[str]) -> Counter[tuple[str, int]]:
    """From rows ``before`` to rows ``after``: ``|d|`` inserted or deleted copies of
    each row, as a change feed says them."""
    out: Counter[tuple[str, int]] = Counter()
    for row in set(before) | set(after):
        d = after[row] - before[row]
        if d:
            out[row, 1 if d > 0 else -1] = abs(d)
    return out
