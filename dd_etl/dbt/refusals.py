"""What of a dbt project cannot be kept up to date, refused by name before any
Spark work: each with the file, the line and what to do instead.

- a Python model: dd_etl keeps SQL views (its Python views are pipeline-file views);
- a snapshot: it records history as of each ``dbt snapshot`` run, which an
  incremental view has no times for;
- a model whose SQL reads ``{{ this }}`` outside ``is_incremental()``: it reads its
  own past output, not its inputs;
- a model that runs a query while compiling (``run_query``, ``statement``, an
  adapter look-up of a relation or its columns), itself or through a macro: its SQL
  depends on data, and would not change when the data does.

Non-deterministic functions are refused as in any view, when its SQL is planned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

QUERYING = re.compile(
    r"\brun_query\s*\(|\{%-?\s*call\s+statement\b|\bload_result\s*\(|"
    r"\badapter\.(get_columns_in_relation|get_relation|get_missing_columns)\s*\(|"
    r"\bload_relation\s*\("
)
"""Jinja that asks the warehouse something while the SQL is being rendered."""
DBT_OWN = ("dbt", "dbt_spark")
"""Packages of dbt and its adapter: their macros' look-ups (``is_incremental()``)
are answered as a full refresh answers them."""


@dataclass(frozen=True)
class DbtRefusal:
    file: str
    line: int
    reason: str


def refusals(manifest: Any, compiled: Mapping[str, Any] | None = None) -> list[DbtRefusal]:
    """The refused nodes of the project: from its parse alone, or, given the
    compiled nodes, what their compiled SQL shows (``{{ this }}``)."""
    if compiled is None:
        return [*_unkeepable_kinds(manifest), *_querying_models(manifest)]
    return list(_reading_themselves(compiled))


def _unkeepable_kinds(manifest: Any) -> Iterator[DbtRefusal]:
    for node in manifest.nodes.values():
        if node.resource_type == "snapshot":
            yield DbtRefusal(
                node.original_file_path,
                1,
                f"snapshot {node.name}: a snapshot records its query's rows as of each "
                "`dbt snapshot` run, which dd_etl cannot keep; read the source's history "
                "instead (a Delta source's change feed) or leave snapshots to dbt",
            )
        elif node.resource_type == "model" and getattr(node, "language", "sql") == "python":
            yield DbtRefusal(
                node.original_file_path,
                1,
                f"Python model {node.name}: dd_etl keeps SQL models; write it in SQL, "
                "or as a Python view of the pipeline file (`views: {name: {python: ...}}`)",
            )


def _querying_models(manifest: Any) -> Iterator[DbtRefusal]:
    macros = manifest.macros
    for node in manifest.nodes.values():
        if node.resource_type != "model":
            continue
        found = _query_in(node.raw_code or "")
        if found is not None:
            yield _querying(node, node.original_file_path, found, "")
            continue
        for macro in _macros_of(node, macros):
            found = _query_in(macro.macro_sql or "")
            if found is not None:
                via = f" (through macro {macro.name}, {macro.original_file_path})"
                yield _querying(node, node.original_file_path, found, via)
                break


def _querying(node: Any, file: str, found: tuple[str, int], via: str) -> DbtRefusal:
    call, line = found
    if via:
        line = 1
    return DbtRefusal(
        file,
        line,
        f"model {node.name} calls {call}{via} while it is compiled: its SQL would depend "
        "on what a query returns, which no change of the data would update; compute those "
        "values in the SQL itself (a join or a subquery)",
    )


def _query_in(code: str) -> tuple[str, int] | None:
    m = QUERYING.search(code)
    if m is None:
        return None
    text = m.group(0)
    call = "statement" if "statement" in text else text.rstrip("( \t\n")
    return call, code.count("\n", 0, m.start()) + 1


def _macros_of(node: Any, macros: Mapping[str, Any]) -> Iterator[Any]:
    """The project's and packages' macros ``node`` calls, directly or through others."""
    seen: set[str] = set()
    pending = list(node.depends_on.macros)
    while pending:
        uid = pending.pop()
        if uid in seen or uid not in macros:
            continue
        seen.add(uid)
        macro = macros[uid]
        if macro.package_name in DBT_OWN:
            continue
        yield macro
        pending += list(macro.depends_on.macros)


def _reading_themselves(compiled: Mapping[str, Any]) -> Iterator[DbtRefusal]:
    for node in compiled.values():
        if node.resource_type != "model" or not node.relation_name:
            continue
        if re.search(rf"(?<![\w.`]){re.escape(node.relation_name)}(?![\w`])", node.compiled_code):
            raw = node.raw_code or ""
            m = re.search(r"\{\{-?\s*this\b", raw)
            line = 1 if m is None else raw.count("\n", 0, m.start()) + 1
            yield DbtRefusal(
                node.original_file_path,
                line,
                f"model {node.name} reads {{{{ this }}}} outside `is_incremental()`: it "
                "reads its own earlier output, which dd_etl does not keep as an input; "
                "read the sources it was computed from (dd_etl keeps the model up to "
                "date from their changes)",
            )
