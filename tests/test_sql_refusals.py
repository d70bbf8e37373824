"""What no view may say is refused from the parsed text alone, at its place in
the query and with the nearest construct that has an incremental rule; a
pipeline file holding such a view fails as it is read, before Spark starts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import sqlglot

from dd_etl.errors import ConfigError
from dd_etl.pipeline.analysis import view_order
from dd_etl.pipeline.config import load_config
from dd_etl.plan.sql.errors import Located, SqlError
from dd_etl.plan.sql.refusals import refuse


@pytest.mark.parametrize(
    ("sql", "construct", "rewrite", "place"),
    [
        (
            "SELECT DISTINCT ON (a) a, b FROM t",
            "DISTINCT ON",
            "QUALIFY ROW_NUMBER() OVER",
            "line 1, col 21",
        ),
        (
            "SELECT *\nFROM t PIVOT (SUM(x) FOR k IN ('a', 'b'))",
            "PIVOT",
            "SUM(CASE WHEN",
            "line 2",
        ),
        ("SELECT * FROM t UNPIVOT (v FOR k IN (a, b))", "UNPIVOT", "stack(", "line 1"),
        (
            "SELECT * FROM t, LATERAL (SELECT * FROM u WHERE u.id = t.id)",
            "LATERAL with a subquery",
            "a join with the subquery",
            "line 1",
        ),
        (
            "SELECT a FROM t WHERE a > ANY (SELECT b FROM u)",
            "ANY with a subquery",
            "MIN(",
            "line 1",
        ),
        (
            "SELECT a FROM t WHERE a > ALL (SELECT b FROM u)",
            "ALL with a subquery",
            "MAX(",
            "line 1",
        ),
        ("SELECT a FROM t TABLESAMPLE (10 PERCENT)", "TABLESAMPLE", "xxhash64", "line 1"),
        (
            "SELECT TRANSFORM(a) USING 'cat' FROM t",
            "TRANSFORM … USING a script",
            "Python view",
            "line 1",
        ),
        (
            "SELECT a FROM t ORDER BY a FETCH FIRST 10 PERCENT ROWS ONLY",
            "FETCH … PERCENT",
            "LIMIT n",
            "line 1",
        ),
    ],
)
def test_a_construct_without_an_incremental_rule_is_refused_with_its_rewrite(
    sql: str, construct: str, rewrite: str, place: str
) -> None:
    tree = sqlglot.parse_one(sql, read="spark")
    with pytest.raises(SqlError) as info:
        refuse(tree, Located("v", sql, "spark"))
    message = str(info.value)
    assert message.startswith(f"view v, {place}"), message
    assert f"{construct} is not supported; write " in message and rewrite in message, message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t ORDER BY a FETCH FIRST 3 ROWS WITH TIES",
        "SELECT a FROM t LATERAL VIEW explode(xs) e AS x",
        "SELECT a FROM t WHERE a IN (SELECT b FROM u)",
        "SELECT DISTINCT a FROM t",
    ],
)
def test_supported_constructs_pass(sql: str) -> None:
    refuse(sqlglot.parse_one(sql, read="spark"), Located("v", sql, "spark"))


def test_a_pipeline_file_with_a_refused_view_fails_as_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: p
            warehouse: wh
            sources:
              orders: {format: delta, path: data/orders}
            views:
              latest:
                sql: |
                  SELECT DISTINCT ON (customer) customer, amount
                  FROM orders ORDER BY customer, ts DESC
            """
        )
    )
    with pytest.raises(ConfigError) as info:
        view_order(load_config(path))
    assert info.value.key == "views.latest.sql" and info.value.line == 8
    assert "line 1, col 21 of the query: DISTINCT ON is not supported" in info.value.reason
    assert "QUALIFY ROW_NUMBER()" in info.value.reason
