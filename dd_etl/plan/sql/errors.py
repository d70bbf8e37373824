"""SQL compile errors that point at the offending construct.

Every error names the view, the line and column in the view's SQL, and quotes
the construct, so a pipeline author can find it without reading the plan:
``view fares, line 2, col 14: unknown column 'fare' in "SUM(fare)"``.
"""

from __future__ import annotations

import re

from sqlglot import exp

from dd_etl.errors import NotDeterministic, PlanError, first_line


class SqlError(PlanError):
    """A view whose SQL cannot be compiled: where, what, and why."""

    def __init__(
        self, view: str, message: str, line: int | None = None, col: int | None = None
    ) -> None:
        where = f"view {view}" + (f", line {line}, col {col}" if line is not None else "")
        super().__init__(f"{where}: {message}")
        self.view = view
        self.line = line
        self.col = col
        self.reason = message


def start_of(node: exp.Expr) -> int | None:
    """Offset of the first token of ``node`` the parser recorded (identifiers and
    literals carry their offsets; operators and functions do not)."""
    starts = [
        n.meta["start"]
        for n in node.walk()
        if isinstance(n, exp.Expr) and isinstance(n.meta.get("start"), int)
    ]
    return min(starts) if starts else None


def line_col(sql: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset."""
    before = sql[:offset]
    line = before.count("\n") + 1
    return line, offset - (before.rfind("\n") + 1) + 1


def quote(node: exp.Expr, dialect: str) -> str:
    """The construct as SQL, short enough for one line of an error message."""
    plain = node.copy()
    for ident in list(plain.find_all(exp.Identifier)):
        if ident.quoted and ident.name.isidentifier():
            ident.set("quoted", False)
    text = plain.sql(dialect=dialect)
    return text if len(text) <= 120 else text[:117] + "..."


class Located:
    """Builds errors for one view: finds positions in its SQL text."""

    def __init__(self, view: str, sql: str, dialect: str) -> None:
        self.view = view
        self.sql = sql
        self.dialect = dialect

    def error(
        self,
        message: str,
        node: exp.Expr | None = None,
        position: exp.Expr | None = None,
    ) -> SqlError:
        """An error about ``node``, quoted, at the position of ``position`` (default
        ``node``); without any recorded position, at none."""
        text = message if node is None else f'{message} in "{quote(node, self.dialect)}"'
        anchor = position if position is not None else node
        offset = self._offset(anchor) if anchor is not None else None
        if offset is None:
            return SqlError(self.view, text)
        line, col = line_col(self.sql, offset)
        return SqlError(self.view, text, line, col)

    def _offset(self, node: exp.Expr) -> int | None:
        """Where ``node`` starts: a token's recorded offset, or for a function
        without one (``CURRENT_DATE``), its name's first place in the text."""
        offset = start_of(node)
        if offset is None and isinstance(node, exp.Func):
            name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            found = re.search(rf"\b{re.escape(name)}\b", self.sql, re.IGNORECASE)
            offset = found.start() if found else None
        return offset

    def unsupported(self, what: str, node: exp.Expr, why: str = "") -> SqlError:
        return self.error(f"{what} is not supported" + (f" ({why})" if why else ""), node)


def spark_reason(e: Exception) -> str:
    """Why Spark rejected an expression: the first line of its error."""
    return first_line(e).split(" SQLSTATE")[0]


def rejection(e: Exception) -> str:
    """Why an expression cannot be an operator's, as an error about it says it."""
    if isinstance(e, NotDeterministic):
        return str(e)
    return f"Spark cannot evaluate it: {spark_reason(e)}"
