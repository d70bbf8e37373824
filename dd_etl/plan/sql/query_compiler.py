"""What the parts of a query that contain queries ask of the compiler.

A recursive CTE (``recursion``) and a subquery (``subqueries``) each compile
queries of their own, inside the query that ``relational.Compiler`` is
compiling, which calls them: they ask it for no more than this, so they depend
on this description, not on the compiler that uses them.
"""

from __future__ import annotations

from typing import Protocol

from sqlglot import exp

from dd_etl.plan.sql.errors import Located
from dd_etl.plan.sql.relation import Ctes, Output
from dd_etl.plan.sql.scope import Names


class QueryCompiler(Protocol):
    @property
    def loc(self) -> Located:
        """Builds the errors of the view being compiled."""
        ...

    @property
    def names(self) -> Names:
        """The view's internal column names, each fresh."""
        ...

    def query(self, node: exp.Expr, ctes: Ctes) -> Output:
        """``node``, a query, compiled with the CTEs ``ctes`` in scope."""
        ...
