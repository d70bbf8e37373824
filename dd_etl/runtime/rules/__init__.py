"""One rule per kind of plan node (``rule.py``): how it is computed as a change,
inside a loop and from scratch. Adding an operator adds its node kind, a module
here and its line below."""

from __future__ import annotations

from typing import Any, TypeVar

from dd_etl.errors import PlanError
from dd_etl.plan import nodes as n
from dd_etl.runtime.rules import (
    accumulate,
    arrange,
    constant,
    delta_query,
    iterate,
    join,
    linear,
    reduce,
    source,
    variable,
    view,
)
from dd_etl.runtime.rules.linear import Linear
from dd_etl.runtime.rules.rule import Rule

N = TypeVar("N", bound=n.Node)

RULES: dict[type[n.Node], Rule[Any]] = {
    n.Source: source.RULE,
    n.Constant: constant.RULE,
    n.Select: linear.SELECT,
    n.Filter: linear.FILTER,
    n.Explode: linear.EXPLODE,
    n.Concat: linear.CONCAT,
    n.Negate: linear.NEGATE,
    n.Consolidate: linear.CONSOLIDATE,
    n.Arrange: arrange.RULE,
    n.Join: join.RULE,
    n.DeltaQuery: delta_query.RULE,
    n.Reduce: reduce.RULE,
    n.Accumulate: accumulate.RULE,
    n.View: view.RULE,
    n.Variable: variable.RULE,
    n.Iterate: iterate.RULE,
}


def rule_for(node: N) -> Rule[N]:
    rule = RULES.get(type(node))
    if rule is None:
        raise PlanError(f"no rule for operator {type(node).__name__}")
    return rule


def linear_rule(node: N) -> Linear[N] | None:
    """``node``'s rule if it is a linear operator: a function of its inputs alone."""
    rule = rule_for(node)
    return rule if isinstance(rule, Linear) else None


__all__ = ["RULES", "Linear", "Rule", "linear_rule", "rule_for"]
