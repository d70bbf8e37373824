"""dbt tests read as ``dbt test`` reads them: a test's view holds its failing rows,
kept up to date like any view; its failures are their number (dbt's default
``fail_calc``, ``count(*)``), and its status follows from ``warn_if``,
``error_if`` and its severity. Counted in the driver from the view's trace: no
Spark job, so ``status`` can report them too."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from dd_etl.dbt.project import Test
from dd_etl.lake import Location
from dd_etl.trace import delta_log, summary
from dd_etl.trace.errors import TraceNotFound

CONDITION = re.compile(r"^\s*(!=|<>|>=|<=|==|=|>|<)\s*(-?\d+)\s*$")
OPERATORS: dict[str, Callable[[int, int], bool]] = {
    "!=": operator.ne, "<>": operator.ne, ">=": operator.ge, "<=": operator.le,
    "==": operator.eq, "=": operator.eq, ">": operator.gt, "<": operator.lt,
}  # fmt: skip
Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class TestOutcome:
    test: Test
    failures: int | None
    """None until a run has computed the test's view."""

    @property
    def status(self) -> Status | None:
        if self.failures is None:
            return None
        if self.test.severity == "error" and _holds(self.test.error_if, self.failures):
            return "fail"
        if _holds(self.test.warn_if, self.failures):
            return "warn"
        return "pass"

    def describe(self) -> str:
        t = self.test
        on = f" on {t.model}" if t.model else ""
        if self.failures is None:
            return f"{t.name}{on}: not run yet"
        rows = f"{self.failures} failing row{'s' if self.failures != 1 else ''}"
        return f"{t.name}{on}: {self.status} ({rows}; {t.file})"


def summary_line(found: list[TestOutcome]) -> str:
    counts = {s: sum(1 for o in found if o.status == s) for s in ("pass", "warn", "fail")}
    return f"dbt tests: {counts['pass']} passed, {counts['warn']} warned, {counts['fail']} failed"


def outcomes(tests: list[Test], warehouse: Location) -> list[TestOutcome]:
    """Each test's failures as its view's trace holds them now."""
    found = []
    for test in tests:
        where = warehouse / "views" / test.name
        try:
            snapshot = delta_log.load(where)
        except TraceNotFound:
            found.append(TestOutcome(test, None))
            continue
        held = [f for b in snapshot.state.batches for f in snapshot.files.get(b.id, [])]
        found.append(TestOutcome(test, summary.size(where, held)))
    return found


def _holds(condition: str, failures: int) -> bool:
    """Whether dbt's ``warn_if``/``error_if`` (``!= 0``, ``>10``) holds of ``failures``."""
    m = CONDITION.match(condition)
    if m is None:
        return failures != 0
    return OPERATORS[m.group(1)](failures, int(m.group(2)))
