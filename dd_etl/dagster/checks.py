"""Asset checks: trace invariants and freshness (cheap: Delta logs only, run with
every materialization) and the equivalence audit (a from-scratch recomputation,
its own step, sampled on large views)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import dagster as dg

from dd_etl.dagster.names import asset_key, asset_views
from dd_etl.pipeline.config import LoadedConfig

if TYPE_CHECKING:
    from dd_etl.pipeline.build import Pipeline

INVARIANTS = "trace_invariants"
FRESHNESS = "freshness"
EQUIVALENCE = "equivalence"


def cheap_check_specs(loaded: LoadedConfig) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec(
            INVARIANTS,
            asset=asset_key(loaded, table),
            description="Batches contiguous over [lower, upper); upper, since and reader "
            "holds never moved back (recent Delta log commits)",
        )
        for table in [*loaded.config.sources, *asset_views(loaded)]
    ]
    specs += [
        dg.AssetCheckSpec(
            FRESHNESS,
            asset=asset_key(loaded, view),
            description="Epochs the sources have taken in that the view has not computed",
        )
        for view in asset_views(loaded)
    ]
    return specs


def invariants_result(pipeline: Pipeline, table: str) -> dg.AssetCheckResult:
    from dd_etl.trace.audit import audit
    from dd_etl.trace.errors import TraceNotFound

    node = pipeline.flow.sources.get(table) or pipeline.flow.views[table]
    try:
        report = audit(pipeline.warehouse / str(node.trace_name))
    except TraceNotFound:
        return dg.AssetCheckResult(
            asset_key=asset_key(pipeline.loaded, table),
            check_name=INVARIANTS,
            passed=True,
            metadata={"commits": 0, "note": "no trace yet"},
        )
    return dg.AssetCheckResult(
        asset_key=asset_key(pipeline.loaded, table),
        check_name=INVARIANTS,
        passed=report.ok,
        metadata={"commits": report.commits, "problems": dg.MetadataValue.json(report.problems)},
    )


def freshness_result(pipeline: Pipeline, view: str, max_lag: int) -> dg.AssetCheckResult:
    from dd_etl.plan import nodes as n
    from dd_etl.runtime.epochs import epoch_of

    rt = pipeline.runtime
    upstream = [x for x in rt.upstream_of(view) if isinstance(x, n.Source)]
    sources = min((epoch_of(rt.trace(s).reload().upper) for s in upstream), default=0)
    upper = epoch_of(rt.trace(pipeline.flow.views[view]).reload().upper)
    lag = max(0, sources - upper)
    return dg.AssetCheckResult(
        asset_key=asset_key(pipeline.loaded, view),
        check_name=FRESHNESS,
        passed=lag <= max_lag,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"lag (epochs)": lag, "allowed": max_lag, "view upper": upper},
    )


def equivalence_specs(loaded: LoadedConfig) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(
            EQUIVALENCE,
            asset=asset_key(loaded, view),
            description="The view equals a from-scratch evaluation of its definition at "
            "its latest epoch (hash-sampled rows on large views)",
        )
        for view in asset_views(loaded)
    ]


def equivalence_results(
    pipeline: Pipeline, views: list[str], sample_above: int | None
) -> Iterator[dg.AssetCheckResult]:
    from dd_etl.pipeline.verify import verify

    report = verify(pipeline, views, sample_above=sample_above)
    wrong = {m.what.removeprefix("view "): m for m in report.mismatches}
    for view in views:
        said = [c for c in report.checked + report.skipped if c.startswith(f"view {view} ")]
        mismatch = wrong.get(view)
        metadata: dict[str, object] = {"checked": said[0] if said else "not checked"}
        if mismatch is not None:
            metadata["differing rows"] = mismatch.differences
            metadata["examples (+n missing, -n extra)"] = dg.MetadataValue.json(
                [[count, {k: str(v) for k, v in row.items()}] for count, row in mismatch.rows]
            )
        yield dg.AssetCheckResult(
            asset_key=asset_key(pipeline.loaded, view),
            check_name=EQUIVALENCE,
            passed=mismatch is None,
            metadata=metadata,  # type: ignore[arg-type]
        )
