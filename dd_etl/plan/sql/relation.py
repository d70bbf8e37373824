"""The two shapes a compiled query takes.

``Rel`` is a FROM clause in the making: a collection whose internal columns
hold the SQL columns of every table alias in scope. ``Output`` is a finished
query: its columns, in order, under the names SQL gives them. ``Ctes`` are the
finished queries a query may read by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dd_etl.plan.column_names import column
from dd_etl.plan.dataflow import Collection
from dd_etl.plan.sql.scope import Names, Scope


@dataclass
class Rel:
    coll: Collection
    scope: Scope

    def extend(self, **computed: str) -> Rel:
        """The relation with extra columns computed by Spark SQL expressions."""
        if not computed:
            return self
        keep = [column(c) for c in self.coll.columns]
        return Rel(self.coll.select(*keep, **computed), self.scope)

    def filter(self, predicate: str) -> Rel:
        return Rel(self.coll.filter(predicate), self.scope)


@dataclass
class Output:
    coll: Collection  # columns are internal names, one per output column, in order
    names: list[str]

    def as_rel(self, alias: str, names: Names, used: set[str] | None = None) -> Rel:
        """The output under a table alias, with fresh internal names (a query may
        read the same CTE twice); with ``used``, only those columns are kept."""
        keep = [
            (n, c)
            for n, c in zip(self.names, self.coll.columns, strict=True)
            if used is None or n.lower() in used
        ] or [(self.names[0], self.coll.columns[0])]
        fresh = {(alias, n.lower()): names.fresh(n) for n, _ in keep}
        renamed = {fresh[(alias, n.lower())]: c for n, c in keep}
        if list(renamed) == list(renamed.values()) == self.coll.columns:
            # The collection itself: its arrangements are shared with other views.
            return Rel(self.coll, Scope(fresh))
        coll = self.coll.select(**{new: column(old) for new, old in renamed.items()})
        return Rel(coll, Scope(fresh))


Ctes = Mapping[str, Output]
"""The common table expressions in scope, by name."""
