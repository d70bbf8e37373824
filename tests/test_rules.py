"""Every plan node kind has one rule, and a rule refuses by name what its setting
does not support: no Spark session."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.errors import PlanError
from dd_etl.plan import nodes as n
from dd_etl.runtime.rules import RULES, Linear, linear_rule, rule_for

SCHEMA = StructType([StructField("k", LongType()), StructField("v", LongType())])
SOURCE = n.Source("s", (), SCHEMA, name="t", key=("k",))


def node_kinds() -> list[type[n.Node]]:
    return [
        kind
        for _, kind in inspect.getmembers(n, inspect.isclass)
        if issubclass(kind, n.Node) and kind is not n.Node and kind.__module__ == n.__name__
    ]


class Quiet:
    """A loop round in which nothing has changed: no rule may read an update."""

    def live(self, node: n.Node) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a rule read {name} of a round with nothing in it")


class Busy(Quiet):
    def live(self, node: n.Node) -> bool:
        return True


def test_every_node_kind_has_its_rule() -> None:
    kinds = node_kinds()
    assert n.Reduce in kinds and n.Iterate in kinds
    assert sorted(k.__name__ for k in kinds) == sorted(k.__name__ for k in RULES)


def test_only_the_linear_operators_are_functions_of_their_inputs_alone() -> None:
    select = n.Select("x", (SOURCE,), SCHEMA, exprs=("k", "v"))
    accumulate = n.Accumulate("a", (SOURCE,), SCHEMA, key=("k",), values=("v",))
    assert isinstance(linear_rule(select), Linear)
    assert linear_rule(accumulate) is None
    assert linear_rule(SOURCE) is None


def test_nothing_in_nothing_out_in_a_loop_round() -> None:
    join = n.Join(
        "j", (SOURCE, SOURCE), SCHEMA, left_key=("k",), right_key=("k",), right_columns=()
    )
    select = n.Select("x", (SOURCE,), SCHEMA, exprs=("k", "v"))
    for node in (join, select):
        assert rule_for(node).in_loop(node, Quiet()) is None


def test_a_kind_a_setting_does_not_support_is_refused_by_name() -> None:
    accumulate = n.Accumulate("a", (SOURCE,), SCHEMA, key=("k",), values=("v",))
    with pytest.raises(PlanError, match="no loop rule for operator Accumulate"):
        rule_for(accumulate).in_loop(accumulate, Busy())
    variable = n.Variable("v", (), SCHEMA)
    with pytest.raises(PlanError, match="only be read inside its loop's body"):
        rule_for(variable).from_scratch(variable, Quiet())
    with pytest.raises(PlanError, match="no runtime rule for operator Variable"):
        rule_for(variable).changes(variable, Quiet(), 0)


def test_an_unknown_node_kind_is_refused_by_name() -> None:
    class Median(n.Node):
        pass

    with pytest.raises(PlanError, match="no rule for operator Median"):
        rule_for(Median("m", (SOURCE,), SCHEMA))
