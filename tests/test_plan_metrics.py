"""A shared job's executed plan split among the traces whose parts it computed:
pure, over plans written out as trees of operators with their metrics."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dd_etl.profiling import Cost, RunProfile, _share_task_time, layer_label
from dd_etl.spark_driver import PlanWork
from dd_etl.spark_driver.plan_metrics import metrics, operator_name, split


@dataclass
class Op:
    name: str
    values: dict[str, int] = field(default_factory=dict)
    inputs: list[Op] = field(default_factory=list)


def _split(root: Op, parts: int) -> tuple[PlanWork, list[PlanWork]] | None:
    return split(root, parts, lambda op: op.inputs, lambda op: op.values)


def aggregate(rows: int, ms: int, shuffled: int) -> Op:
    """A part as Spark runs a grouped aggregate of a scan: fused code over an
    exchange of partial aggregates."""
    partial = Op(
        "WholeStageCodegen (1)",
        {"pipelineTime": ms},
        [Op("HashAggregate", {"aggTime": ms // 2}, [Op("Scan parquet db.t", {"filesSize": 1000})])],
    )
    exchange = Op(
        "Exchange", {"shuffleBytesWritten": shuffled, "shuffleWriteTime": 10**6}, [partial]
    )
    stage = Op("ShuffleQueryStage", {}, [exchange])
    final = Op(
        "HashAggregate", {"numOutputRows": rows, "aggTime": 3}, [Op("InputAdapter", {}, [stage])]
    )
    return Op("WholeStageCodegen (2)", {"pipelineTime": ms}, [final])


def test_metrics_are_read_from_the_text_of_sparks_map() -> None:
    text = (
        "HashMap(spillSize -> SQLMetric(id: 206, name: Some(spill size), value: 0), "
        "aggTime -> SQLMetric(id: 207, name: Some(time in aggregation build), value: 13), "
        "numOutputRows -> SQLMetric(id: 204, name: Some(number of output rows), value: 100))"
    )
    assert metrics(text) == {"spillSize": 0, "aggTime": 13, "numOutputRows": 100}
    assert metrics("Map()") == {}
    assert operator_name("WholeStageCodegen (12)") == "WholeStageCodegen"
    assert operator_name("Scan parquet spark_catalog.db.trips") == "Scan parquet"


def test_each_part_of_the_union_gets_its_subtrees_work_and_the_rest_what_is_above() -> None:
    """The parts are the union's children in order, looked through the coalesced
    unions that group them into tasks; the write above them is the rest."""
    a, b, c = aggregate(5, 40, 100), aggregate(7, 20, 50), aggregate(9, 2, 10)
    union = Op(
        "Union", {}, [Op("Coalesce", {}, [Op("Union", {}, [a, b])]), Op("Coalesce", {}, [c])]
    )
    root = Op("MapInArrow", {"numOutputRows": 3}, [Op("Sort", {"sortTime": 30}, [union])])
    found = _split(Op("AdaptiveSparkPlan", {}, [root]), 3)
    assert found is not None
    rest, parts = found
    # a single child under a coalesce is a part, coalesce and all
    assert [p.rows for p in parts] == [5, 7, 9]
    # each stage's generated code once, the aggregations fused into it not again
    assert parts[0].seconds == {"code": 0.08, "shuffle write": 0.001}
    assert parts[0].task_seconds == 0.04 + 0.04 + 0.001
    assert [p.shuffled_bytes for p in parts] == [100, 50, 10]
    assert [p.scanned_bytes for p in parts] == [1000] * 3
    assert parts[0].operators == {"HashAggregate": 2, "Exchange": 1, "Scan parquet": 1}
    assert rest.seconds == {"sort": 0.03} and rest.operators == {"MapInArrow": 1, "Sort": 1}
    assert rest.task_seconds == 0.03  # a sort outside generated code: its own time


def test_a_timer_holding_its_inputs_hides_theirs_down_to_the_stage_below() -> None:
    """Interpreted operators, as a small run has them: a hash build consumes its
    input whole, so its timer holds the sort beneath it, and a sort's timer
    holds the sort alone; an exchange starts another stage's tasks, whose
    timers count again."""
    scanned = Op("Scan ExistingRDD", {"numOutputRows": 4})
    below = Op("HashAggregate", {"aggTime": 7}, [Op("Sort", {"sortTime": 5}, [scanned])])
    exchange = Op("Exchange", {"shuffleWriteTime": 2 * 10**6}, [below])
    build = Op("ShuffledHashJoin", {"buildTime": 30}, [Op("Sort", {"sortTime": 20}, [exchange])])
    _, [whole] = _split(Op("Sort", {"sortTime": 3}, [build]), 1)  # type: ignore[misc]
    # the sorts under the build and under the aggregation are in their timers
    kinds = {"sort": 0.003, "hash build": 0.03, "aggregate": 0.007, "shuffle write": 0.002}
    assert whole.seconds == pytest.approx(kinds)
    assert whole.task_seconds == pytest.approx(sum(kinds.values()))


def test_a_plan_whose_union_lost_a_part_is_not_split_and_one_part_is_all() -> None:
    """Spark drops a union's child it knows empty: the parts cannot be told apart
    by position then, and nothing is attributed by guess."""
    a, b = aggregate(5, 40, 100), aggregate(7, 20, 50)
    assert _split(Op("Union", {}, [a, b]), 3) is None
    assert _split(a, 2) is None  # no union at all
    # one part is all of the plan, unions of its own included
    rest, [whole] = _split(Op("Union", {}, [a, b]), 1)  # type: ignore[misc]
    assert rest == PlanWork() and whole.rows == 5 and whole.shuffled_bytes == 150


def test_a_profile_prints_each_layer_with_its_shared_jobs_then_its_traces() -> None:
    shared = PlanWork(
        rows=12,
        seconds={"code": 1.5, "sort": 0.5},
        task_seconds=1.5,
        scanned_bytes=2**20,
        shuffled_bytes=2**21,
        operators={"Sort": 1},
    )
    above = PlanWork(seconds={"code": 1.75}, task_seconds=1.75, operators={"MapInArrow": 1})
    traces = {
        layer_label(0): Cost(2.0, 1, 2, {"spark": 1.8}, 0, 0, 0, 4, 3.25, 2**21, above),
        "views/a": Cost(0.5, 0, 0, {"planning": 0.5}, 0, 100, shared=shared),
        "views/b": Cost(0.7, 0, 0, {"planning": 0.7}, 0, 100),
        "sinks": Cost(0.1, 0, 0, {"sinks": 0.1}),
    }
    profile = RunProfile(
        3.0, 1, 2, "large", {"spark": 1.8}, traces, ["large"], [["views/a", "views/b"]]
    )
    text = profile.lines()
    assert text[2] == "  layer 0 (large, 2 traces)"
    assert (
        text[3].startswith("    shared jobs")
        and "4 tasks" in text[3]
        and "3.25s task time" in text[3]
    )
    assert "2.0 MB shuffled" in text[3]
    # what the jobs did above the parts: no rows of a trace of their own
    assert text[4].strip() == (
        "above the parts: task time 1.75s (code 1.75s); 0.0 MB scanned, 0.0 MB shuffled; "
        "MapInArrow x1"
    )
    assert text[5].lstrip().startswith("views/b") and text[6].lstrip().startswith("views/a")
    assert text[7].strip() == (
        "in shared jobs: 12 rows; task time 1.50s (code 1.50s, sort 0.50s); 1.0 MB scanned, "
        "2.0 MB shuffled; Sort x1"
    )
    assert text[8] == "  outside the layers" and text[9].lstrip().startswith("sinks")


def test_shared_jobs_task_time_is_shared_out_as_their_parts_timers_saw_it() -> None:
    """The stages' task time is exact, the plan's timers are not (they overlap,
    and miss a task's start): each part gets the stages' time in proportion to
    its timers, the owner the rest's share, and together they are the jobs'."""
    owner = layer_label(1)
    traces = {
        owner: Cost(1.0, 2, 2, {}, 0, 0, 0, 2, 6.0, 0, PlanWork(task_seconds=1.0)),
        "a": Cost(0.1, 0, 0, {}, 0, 0, shared=PlanWork(seconds={"code": 3.0}, task_seconds=3.0)),
        "b": Cost(0.1, 0, 0, {}, 0, 0, shared=PlanWork(task_seconds=4.0)),
    }
    _share_task_time(traces, {owner: owner, "a": owner, "b": owner, "gone": owner})
    shares = [traces[t].shared.task_seconds for t in (owner, "a", "b")]  # type: ignore[union-attr]
    assert shares == [0.75, 2.25, 3.0]
    assert traces["a"].shared == PlanWork(seconds={"code": 2.25}, task_seconds=2.25)
