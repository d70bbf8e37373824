"""What no view may say, found in the parsed text before any table is read or
Spark is asked: functions whose value is not a function of the row, and
constructs with no incremental rule, each refused at its place in the query
with the nearest construct that has one.

The pipeline loader runs these on every SQL view as it reads the file, so a
pipeline that cannot run fails before Spark starts; the compiler runs them too,
for views compiled on their own.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from dd_etl.plan.sql.errors import Located

CLOCKS = (exp.CurrentDate, exp.CurrentTimestamp, exp.CurrentTime, exp.CurrentDatetime)
CLOCK_NAMES = {"now", "curdate", "today", "localtimestamp", "get_current_time", "unix_timestamp"}
CHANCE = (exp.Rand, exp.Randn, exp.Uuid)
CHANCE_NAMES = {"random", "uuid", "monotonically_increasing_id", "spark_partition_id", "shuffle"}


def refuse(tree: exp.Expr, loc: Located) -> None:
    """Raise the first refusal of the query, at its place: non-determinism first."""
    check_deterministic(tree, loc)
    check_supported(tree, loc)


def check_deterministic(tree: exp.Expr, loc: Located) -> None:
    """Refuse a function whose value is not a function of the row: a view's
    rows are retracted by value, so each evaluation must give the one before's
    value. (Spark's own flag catches the rest, user functions included, as the
    operators are built: ``Dataflow.infer``.)"""
    for node in tree.walk():
        name = node.name.lower() if isinstance(node, exp.Anonymous) else ""
        clock = isinstance(node, CLOCKS) or name in CLOCK_NAMES or _clock_default(node)
        if clock and not (name == "unix_timestamp" and node.expressions):
            raise loc.error(
                "the time of evaluation is not deterministic: a re-run would compute other "
                "rows than those retracted later (take the time from a column of a source, "
                "such as its event or load time)",
                node,
            )
        if isinstance(node, CHANCE) or name in CHANCE_NAMES:
            raise loc.error(
                "a random value is not deterministic: a re-run would compute other rows "
                "than those retracted later (derive it from the row, e.g. xxhash64 of its "
                "key columns)",
                node,
            )


def _clock_default(node: exp.Expr) -> bool:
    """``unix_timestamp()`` as Spark's dialect parses it: the current time."""
    return isinstance(node, exp.StrToUnix) and node.this is None


def _has_query(node: exp.Expr) -> bool:
    return isinstance(node.this, exp.Subquery | exp.Query)


def _fetch_percent(node: exp.Expr) -> bool:
    options = node.args.get("limit_options")
    return options is not None and bool(options.args.get("percent"))


UNSUPPORTED: tuple[tuple[type[exp.Expr], Callable[[exp.Expr], bool], str, str], ...] = (
    (
        exp.Distinct,
        lambda n: bool(n.args.get("on")),
        "DISTINCT ON",
        "QUALIFY ROW_NUMBER() OVER (PARTITION BY … ORDER BY …) = 1",
    ),
    (
        exp.Pivot,
        lambda n: not n.args.get("unpivot"),
        "PIVOT",
        "GROUP BY with one SUM(CASE WHEN k = … THEN x END) per pivoted column",
    ),
    (
        exp.Pivot,
        lambda n: bool(n.args.get("unpivot")),
        "UNPIVOT",
        "LATERAL VIEW stack(n, 'a', a, 'b', b, …) AS k, v",
    ),
    (
        exp.Lateral,
        _has_query,
        "LATERAL with a subquery",
        "a join with the subquery, or LATERAL VIEW explode(…) for an array",
    ),
    (
        exp.Any,
        _has_query,
        "ANY with a subquery",
        "x > (SELECT MIN(y) …) or EXISTS (SELECT … WHERE x > y)",
    ),
    (
        exp.All,
        _has_query,
        "ALL with a subquery",
        "x > (SELECT MAX(y) …) or NOT EXISTS (SELECT … WHERE x <= y)",
    ),
    (
        exp.TableSample,
        lambda n: True,
        "TABLESAMPLE",
        "a filter on a hash of the key, as pmod(xxhash64(id), 100) < 10",
    ),
    (
        exp.QueryTransform,
        lambda n: True,
        "TRANSFORM … USING a script",
        "a Python view over the collection API",
    ),
    (exp.Connect, lambda n: True, "CONNECT BY", "WITH RECURSIVE"),
    (exp.Fetch, _fetch_percent, "FETCH … PERCENT", "FETCH FIRST n ROWS, or LIMIT n"),
)
"""Constructs with no incremental rule: the node type, which of its nodes, the
construct's name, and the nearest supported rewrite."""


def check_supported(tree: exp.Expr, loc: Located) -> None:
    """Refuse the first construct of ``UNSUPPORTED`` in the query."""
    for node in tree.walk():
        for kind, matches, construct, rewrite in UNSUPPORTED:
            if isinstance(node, kind) and matches(node):
                raise loc.error(f"{construct} is not supported; write {rewrite}", node)
