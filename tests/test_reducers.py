"""Reductions are dispatched by kind, every kind there is: no Spark session."""

from __future__ import annotations

import typing

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from dd_etl.errors import PlanError
from dd_etl.plan import nodes as n
from dd_etl.runtime.reducers import reducer_for

SCHEMA = StructType([StructField("k", LongType()), StructField("v", LongType())])


def reduction(kind: str) -> n.Reduce:
    src = n.Source("s", (), SCHEMA, name="t", key=("k",))
    return n.Reduce(
        "r",
        (src,),
        SCHEMA,
        key=("k",),
        kind=kind,
        column="v",
        function=len,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("kind", typing.get_args(n.ReduceKind))
def test_every_kind_has_a_reducer(kind: str) -> None:
    assert callable(reducer_for(reduction(kind)))


def test_an_unknown_kind_is_refused_not_taken_for_min_or_max() -> None:
    with pytest.raises(PlanError, match="unknown kind 'median'"):
        reducer_for(reduction("median"))
