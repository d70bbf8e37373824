"""Columns a plan names, made without Spark's JVM.

Building a pipeline's plans names columns thousands of times (every SQL view
renames its inputs' columns and its output's), and a PySpark column is three
round trips to the JVM to make and one more each time a node id prints it: at
200 views, about half the time opening the pipeline took. A plain column name is
SQL text instead, which operators hand to Spark with the rest of their
expressions (``sql_text``), and which prints in a node id as Spark prints the
column, so plan ids, which name traces, stay what they were.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from dd_etl.sql_syntax import quote


class ColumnName(str):
    """A column by its name: SQL text (the quoted name) that keeps the name."""

    name: str

    def __new__(cls, name: str) -> ColumnName:
        named = super().__new__(cls, quote(name))
        named.name = name
        return named

    def __getnewargs__(self) -> tuple[str]:
        # a copy or a pickle makes it again from its name, not from its SQL text
        return (self.name,)

    @property
    def fingerprint(self) -> str:
        """What ``str(F.col(name))`` is, for a name Spark takes as it is."""
        return f"Column<'{self.name}'>"


def column(name: str) -> ColumnName | Column:
    """The column ``name``, as ``F.col(name)`` reads it: a name with a dot (a
    struct's field, to Spark) or a backtick (quoting) stays Spark's to parse."""
    if not name or "." in name or "`" in name:
        return F.col(name)
    return ColumnName(name)
