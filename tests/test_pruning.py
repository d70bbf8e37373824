"""Columns pruned before arrangements: each arrangement of a view's plan holds the
columns read of it and its key, and nothing else.

That the narrowed plans compute what the wide ones did is shown by the
equivalence tests (``test_runtime_equivalence``, ``test_random_dataflows``), whose
joins, counts and unions are narrowed so."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from dd_etl.plan import Dataflow
from dd_etl.plan import aggregates as agg
from dd_etl.plan import nodes as n
from dd_etl.plan.graph import upstream
from dd_etl.plan.pruning import named_in
from tests.support.trips_and_zones import TRIPS, ZONES

COLUMNS = ["id", "pc", "fare", "fare_cents", "Label"]


def test_an_expression_names_the_columns_whose_names_it_holds_as_words() -> None:
    assert named_in(["fare * 100 + pc"], COLUMNS) == {"fare", "pc"}
    assert named_in(["`fare_cents` AS cents"], COLUMNS) == {"fare_cents"}
    assert named_in(["upper(label)"], COLUMNS) == {"label"}  # as Spark: any case
    assert named_in(["count(1)", "'x'"], COLUMNS) == set()


def test_a_star_names_every_column() -> None:
    assert named_in(["*"], COLUMNS) == {c.lower() for c in COLUMNS}
    assert named_in(["count(*)"], COLUMNS) == {c.lower() for c in COLUMNS}
    assert named_in(["t.*"], COLUMNS) == {c.lower() for c in COLUMNS}
    assert named_in(["struct(fare, * )"], COLUMNS) == {c.lower() for c in COLUMNS}
    # a product is no star, nor is one as Spark prints a column's
    assert named_in(["fare * 2", "*(pc, 2)", "'*'"], COLUMNS) == {"fare", "pc"}


def arrangements(flow: Dataflow, view: str) -> list[list[str]]:
    """The columns of each arrangement the view reads, sorted."""
    return sorted(x.columns for x in upstream([flow.views[view]]) if isinstance(x, n.Arrange))


@pytest.mark.spark
def test_an_arrangement_holds_the_columns_its_readers_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    flow = Dataflow(spark, tmp_path)
    trips = flow.source("trips", TRIPS, key=["id"])
    zones = flow.source("zones", ZONES)
    joined = trips.join(zones, on="pc")
    flow.view("labels", joined.filter("fare IS NULL").select("label"))
    flow.view("revenue", joined.aggregate(["label"], total=agg.sum_(F.col("fare") * 2)))
    flow.view("counts", trips.count(["pc"]))
    flow.view("everything", joined)
    flow.view("left", trips.join(zones, on="pc", how="left").select("id", "label"))

    # the filter's column stays until the filter; a PySpark column's by its text
    assert arrangements(flow, "labels") == [["pc", "fare"], ["pc", "label"]]
    assert arrangements(flow, "revenue") == [["pc", "fare"], ["pc", "label"]]
    assert arrangements(flow, "counts") == [["pc"]]
    assert arrangements(flow, "everything") == [["id", "pc", "fare", "tags"], ["pc", "label"]]
    # an outer join's parts (inner join, unmatched rows padded) narrowed alike
    left = arrangements(flow, "left")
    assert left and all("fare" not in c and "tags" not in c for c in left), left
    # views reading the same columns of an arrangement share it
    shared = {x.id for x in upstream([flow.views["labels"]]) if isinstance(x, n.Arrange)}
    assert shared & {x.id for x in upstream([flow.views["revenue"]])}


@pytest.mark.spark
def test_a_view_plan_is_its_own_whatever_else_reads_its_inputs(
    spark: SparkSession, tmp_path: Path
) -> None:
    def plan(*others: str) -> str:
        flow = Dataflow(spark, tmp_path)
        trips = flow.source("trips", TRIPS, key=["id"])
        zones = flow.source("zones", ZONES)
        joined = trips.join(zones, on="pc")
        for other in others:
            flow.view(other, joined.select("id", "tags"))
        return flow.view("labels", joined.select("label")).node.inputs[0].id

    assert plan() == plan("tags_too")


@pytest.mark.spark
def test_a_loop_and_what_it_reads_are_left_whole(spark: SparkSession, tmp_path: Path) -> None:
    flow = Dataflow(spark, tmp_path)
    trips = flow.source("trips", TRIPS, key=["id"])
    zones = flow.source("zones", ZONES)
    edges = trips.join(zones, on="pc")
    start = edges.select("pc")
    reach = start.iterate(
        lambda r: r.concat(r.join(edges, on="pc").select("pc")).distinct(),
        max_iterations=5,
    )
    view = flow.view("reach", reach.join(edges, on="pc").select("pc", "label"))
    outside = view.node.inputs[0]
    loop = next(x for x in upstream([outside]) if isinstance(x, n.Iterate))
    whole = [x for x in upstream([loop]) if isinstance(x, n.Arrange)]
    assert len(whole) == 3
    assert all(x.columns == x.inputs[0].columns for x in whole)
    assert all(not isinstance(x.inputs[0], n.Select) for x in whole)
