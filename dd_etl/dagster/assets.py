"""A pipeline as Dagster assets: one per source and per view, lineage from the SQL.

They are one subsettable multi-asset, so a run that materializes several of them
is one step: one ``run_tick`` over the selection, the same code path as ``dd-etl
run``, on the dd_etl server's warm Spark when there is one (``step``).
Materializing a source takes in its new data as the pipeline's next epoch;
materializing a view computes its pending epochs (and those of the traces it
reads) and commits its sinks. The ``pool`` keeps two ticks of one pipeline from
running at once on an instance with pool limits; the tick lock refuses the
second anywhere else.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

from dd_etl.dagster.checks import cheap_check_specs
from dd_etl.dagster.dbt_nodes import spec_fields, test_check_specs
from dd_etl.dagster.names import (
    KIND_TAG,
    PIPELINE_TAG,
    WARM_UNTIL_TAG,
    asset_key,
    asset_views,
    identifier,
)
from dd_etl.dagster.resources import SparkResource
from dd_etl.dagster.step import Step, execute
from dd_etl.pipeline.analysis import referenced_tables, view_order
from dd_etl.pipeline.config import LoadedConfig


def asset_specs(loaded: LoadedConfig) -> list[dg.AssetSpec]:
    config = loaded.config
    group = identifier(config.name)
    specs = []
    for source, sc in config.sources.items():
        fields = {
            "group_name": group,
            "description": f"Source {source}: {sc.format} at {sc.path}",
            "kinds": {"spark", "delta" if sc.format == "delta" else sc.format},
            "metadata": {"path": str(loaded.resolve(sc.path))},
            **(spec_fields(loaded, source) or {}),
        }
        specs.append(dg.AssetSpec(asset_key(loaded, source), skippable=True, **fields))
    views = set(asset_views(loaded))
    for view in view_order(loaded):
        if view not in views:
            continue
        vc = config.views[view]
        definition = (
            f"```sql\n{vc.sql.strip()}\n```" if vc.sql is not None else f"Python: `{vc.python}`"
        )
        metadata: dict[str, Any] = {"definition": dg.MetadataValue.md(definition)}
        if vc.materialize is not None:
            metadata["materialized at"] = str(loaded.resolve(vc.materialize.path))
        fields = {
            "group_name": group,
            "description": f"View {view}, kept up to date incrementally",
            "kinds": {"spark", "delta"},
            **(spec_fields(loaded, view) or {}),
        }
        fields["metadata"] = {**metadata, **fields.get("metadata", {})}
        specs.append(
            dg.AssetSpec(
                asset_key(loaded, view),
                deps=[asset_key(loaded, t) for t in referenced_tables(loaded, view, vc)],
                skippable=True,
                **fields,
            )
        )
    return specs


def pipeline_assets(loaded: LoadedConfig, max_lag: int = 0) -> dg.AssetsDefinition:
    """The pipeline's assets; loading them reads the config only (no Spark)."""
    name = loaded.config.name
    file = loaded.file
    keys = {asset_key(loaded, t): t for t in [*loaded.config.sources, *asset_views(loaded)]}

    @dg.multi_asset(
        name=f"{identifier(name)}_assets",
        specs=asset_specs(loaded),
        check_specs=[*cheap_check_specs(loaded), *test_check_specs(loaded)],
        can_subset=True,
        op_tags={PIPELINE_TAG: name, KIND_TAG: "tick"},
        pool=f"dd_etl_{identifier(name)}",
    )
    def tick(context: dg.AssetExecutionContext, spark: SparkResource) -> Iterator[Any]:
        checks = tuple((keys[c.asset_key], c.name) for c in context.selected_asset_check_keys)
        step = Step(
            file=str(file),
            tables=tuple(keys[k] for k in context.selected_asset_keys if k in keys),
            checks=checks,
            max_lag=max_lag,
            master=spark.master,
            conf=spark.conf,
            remote=spark.remote,
        )
        warm_until = context.run.tags.get(WARM_UNTIL_TAG)
        yield from execute(step, context.log.info, float(warm_until) if warm_until else None)

    return tick
