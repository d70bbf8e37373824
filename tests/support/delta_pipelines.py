"""Shared by the tests of Delta sources and sinks (no tests here): a pipeline file
of Delta sources keyed by one column and SQL views, written under a test's root."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def delta_pipeline(
    root: Path,
    name: str,
    sources: dict[str, str],
    views: dict[str, str],
    materialize: bool,
    changes: bool = False,
    sizing: Mapping[str, int] | None = None,
) -> Path:
    """``root/pipeline.yaml``: each source a Delta table at ``root/<source>`` keyed by
    ``sources[source]``; each view ``views[view]``, materialized at ``out/<view>``
    if ``materialize``, its change feed at ``feeds/<view>`` if ``changes``;
    ``sizing`` the file's ``sizing:`` settings."""
    lines = [
        f"name: {name}",
        "warehouse: wh",
        'spark: {master: "local[2]", conf: {spark.sql.shuffle.partitions: "2"}}',
        "sources:",
        *(f"  {s}: {{format: delta, path: {s}, key: [{key}]}}" for s, key in sources.items()),
        "views:",
    ]
    for view, sql in views.items():
        lines += [f"  {view}:", f"    sql: '{sql}'"]
        if materialize:
            lines.append(f"    materialize: {{path: out/{view}}}")
        if changes:
            lines.append(f"    changes: {{path: feeds/{view}}}")
    if sizing:
        lines.append(f"sizing: {{{', '.join(f'{k}: {v}' for k, v in sizing.items())}}}")
    path = root / "pipeline.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path
