"""A pipeline as Dagster assets: one per source and per view, lineage from the SQL.

They are one subsettable multi-asset, so a run that materializes several of them
is one step: one SparkSession and one ``run_tick`` over the selection, the same
code path as ``dd-etl run``. Materializing a source takes in its new data as the
pipeline's next epoch; materializing a view computes its pending epochs (and
those of the traces it reads) and commits its sinks. The ``pool`` keeps two
ticks of one pipeline from running at once on an instance with pool limits;
the tick lock refuses the second anywhere else.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from dd_etl.dagster.checks import (
    FRESHNESS,
    INVARIANTS,
    cheap_check_specs,
    freshness_result,
    invariants_result,
)
from dd_etl.dagster.metadata import source_metadata, view_metadata
from dd_etl.dagster.names import KIND_TAG, PIPELINE_TAG, asset_key, identifier
from dd_etl.dagster.resources import SparkResource
from dd_etl.errors import DdEtlError
from dd_etl.pipeline.analysis import referenced_tables, view_order
from dd_etl.pipeline.build import Pipeline, open_pipeline
from dd_etl.pipeline.config import LoadedConfig, load_config
from dd_etl.pipeline.progress import Progress
from dd_etl.pipeline.tick import run_tick


def asset_specs(loaded: LoadedConfig) -> list[dg.AssetSpec]:
    config = loaded.config
    name = config.name
    specs = []
    for source, sc in config.sources.items():
        specs.append(
            dg.AssetSpec(
                asset_key(name, source),
                group_name=identifier(name),
                description=f"Source {source}: {sc.format} at {sc.path}",
                kinds={"spark", "delta" if sc.format == "delta" else sc.format},
                metadata={"path": str(loaded.resolve(sc.path))},
                skippable=True,
            )
        )
    for view in view_order(loaded):
        vc = config.views[view]
        definition = (
            f"```sql\n{vc.sql.strip()}\n```" if vc.sql is not None else f"Python: `{vc.python}`"
        )
        metadata: dict[str, Any] = {"definition": dg.MetadataValue.md(definition)}
        if vc.materialize is not None:
            metadata["materialized at"] = str(loaded.resolve(vc.materialize.path))
        specs.append(
            dg.AssetSpec(
                asset_key(name, view),
                deps=[asset_key(name, t) for t in referenced_tables(loaded, view, vc)],
                group_name=identifier(name),
                description=f"View {view}, kept up to date incrementally",
                kinds={"spark", "delta"},
                metadata=metadata,
                skippable=True,
            )
        )
    return specs


def pipeline_assets(loaded: LoadedConfig, max_lag: int = 0) -> dg.AssetsDefinition:
    """The pipeline's assets; loading them reads the config only (no Spark)."""
    name = loaded.config.name
    file = loaded.file
    keys = {asset_key(name, t): t for t in [*loaded.config.sources, *loaded.config.views]}

    @dg.multi_asset(
        name=f"{identifier(name)}_assets",
        specs=asset_specs(loaded),
        check_specs=cheap_check_specs(loaded),
        can_subset=True,
        op_tags={PIPELINE_TAG: name, KIND_TAG: "tick"},
        pool=f"dd_etl_{identifier(name)}",
    )
    def tick(context: dg.AssetExecutionContext, spark: SparkResource) -> Iterator[Any]:
        selected = {keys[k] for k in context.selected_asset_keys if k in keys}
        with failures():
            pipeline = open_for(file, spark)
            sources = [s for s in pipeline.flow.sources if s in selected]
            views = [v for v in pipeline.flow.views if v in selected]
            if sources or views:
                yield from _materialize(context, pipeline, sources, views)
            for check in context.selected_asset_check_keys:
                table = keys[check.asset_key]
                if check.name == INVARIANTS:
                    yield invariants_result(pipeline, table)
                elif check.name == FRESHNESS:
                    yield freshness_result(pipeline, table, max_lag)

    return tick


def _materialize(
    context: dg.AssetExecutionContext, pipeline: Pipeline, sources: list[str], views: list[str]
) -> Iterator[dg.MaterializeResult[Any]]:
    rt = pipeline.runtime
    lowers = {v: rt.trace(pipeline.flow.views[v]).reload().upper.epoch_bound() or 0 for v in views}
    progress, finished = logged_progress(context.log)
    report = run_tick(pipeline, progress, sources=sources, views=views)
    context.log.info(
        f"epoch {report.epoch}{' (completing an interrupted tick)' if report.resumed else ''}: "
        f"{'complete' if report.complete else 'open until its other assets run'}"
    )
    for source in sources:
        metadata = source_metadata(pipeline, source, report.epoch, report.sources[source])
        yield dg.MaterializeResult(asset_key=asset_key(pipeline.name, source), metadata=metadata)
    for view in views:
        metadata = view_metadata(
            pipeline,
            view,
            lowers[view],
            report.views.get(view, 0),
            finished.get(view, 0.0),
            report.refresh.get(view),
            report.profile,
        )
        yield dg.MaterializeResult(
            asset_key=asset_key(pipeline.name, view),
            metadata=metadata,
            data_version=dg.DataVersion(str(metadata["upper"])),
        )


def logged_progress(log: Any) -> tuple[Progress, dict[str, float]]:
    """Progress to the run's log; and the seconds from the start until each view's
    last trace was written (its Spark time: a view's jobs overlap its neighbours')."""
    started = time.monotonic()
    finished: dict[str, float] = {}
    lock = threading.Lock()

    def progress(step: str, detail: str, done: float = 1.0) -> None:
        if done >= 1.0:
            with lock:
                if step.startswith("view:"):
                    finished[step.removeprefix("view:")] = time.monotonic() - started
            log.info(f"{step}: {detail}" if detail else step)

    return progress, finished


def open_for(file: Path, spark: SparkResource) -> Pipeline:
    """The pipeline on the resource's Spark (its own settings unless overridden)."""
    settings = load_config(file).config.spark
    return open_pipeline(file, spark.session(settings.master, settings.conf))


@contextmanager
def failures() -> Iterator[None]:
    """dd_etl's errors as Dagster failures: the one-paragraph message in the UI, with
    the error's kind and the exit status ``dd-etl`` would give it as metadata; no
    retry (re-running the same request fails the same way). Other exceptions are
    bugs: Dagster shows them with their stack trace."""
    try:
        yield
    except DdEtlError as e:
        raise dg.Failure(
            description=e.message,
            metadata={"error": type(e).__name__, "exit_status": e.exit_code},
            allow_retries=False,
        ) from e
