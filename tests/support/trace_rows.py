"""A view's rows as any Delta reader finds them in its trace (delta-rs, no Spark): the
updates of the table's current files summed per row. Cheap enough to check every
view after every step of a long test, and independent of dd_etl's own reads."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

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
