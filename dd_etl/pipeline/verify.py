"""``verify``: every view recomputed from scratch and compared with its trace
(invariant 6 of ARCHITECTURE.md), and every source's trace compared with the source itself
at the position its last epoch covered (the change capture was right).

Floating-point columns are compared to single precision: a SUM of doubles
maintained incrementally adds in a different order than a recomputation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType

from dd_etl.pipeline.build import Pipeline
from dd_etl.plan.dataflow import PlanError
from dd_etl.runtime.epochs import epoch_of
from dd_etl.runtime.recompute import recompute
from dd_etl.sources.base import read_position
from dd_etl.trace.columns import DIFF

SHOWN_ROWS = 20
SAMPLE_BUCKETS = 1_000_000


@dataclass
class Mismatch:
    what: str  # "view fares" / "source trips"
    epoch: int
    differences: int
    rows: list[tuple[int, dict[str, object]]] = field(default_factory=list)  # (±count, row)


@dataclass
class VerifyReport:
    checked: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


def compare(
    expected: DataFrame, got: DataFrame, what: str, epoch: int, fraction: float = 1.0
) -> Mismatch | None:
    """Both as distinct rows + ``_diff`` multiplicities; rows whose counts differ
    (+n: expected n more times than present, -n: present n more times than expected).
    ``fraction < 1`` compares only the rows whose hash falls in that share, the same
    rows on both sides, so a sample of a large view is still an exact comparison."""
    names = [c for c in expected.columns if c != DIFF]

    def normal(df: DataFrame, sign: int) -> DataFrame:
        # Sums of doubles depend on the order of addition, which incremental
        # maintenance changes: compare them to single precision (~7 digits).
        cols = [
            F.col(c).cast("float").alias(c)
            if isinstance(df.schema[c].dataType, DoubleType | FloatType)
            else F.col(c)
            for c in names
        ]
        return df.select(*cols, (F.col(DIFF) * sign).alias(DIFF))

    both = normal(expected, 1).unionByName(normal(got, -1))
    if fraction < 1.0:
        bucket = F.pmod(F.xxhash64(*[F.col(c) for c in names]), F.lit(SAMPLE_BUCKETS))
        both = both.where(bucket < F.lit(int(fraction * SAMPLE_BUCKETS)))
    delta = both.groupBy(*names).agg(F.sum(DIFF).alias(DIFF)).where(F.col(DIFF) != 0).cache()
    try:
        count = delta.count()
        if count == 0:
            return None
        rows = [(int(r[DIFF]), {c: r[c] for c in names}) for r in delta.limit(SHOWN_ROWS).collect()]
        return Mismatch(what, epoch, count, rows)
    finally:
        delta.unpersist()


def verify(
    pipeline: Pipeline, views: list[str] | None = None, sample_above: int | None = None
) -> VerifyReport:
    """``sample_above``: views whose trace holds more records than this are compared
    on a hash sample of about that many rows (the recomputation is still whole)."""
    rt = pipeline.runtime
    report = VerifyReport()
    chosen = list(pipeline.flow.views) if views is None else views
    for view in chosen:
        if view not in pipeline.flow.views:
            raise PlanError(f"unknown view {view!r}; views are {sorted(pipeline.flow.views)}")
        trace = rt.trace(pipeline.flow.views[view])
        upper = epoch_of(trace.reload().upper)
        if upper == 0:
            report.skipped.append(f"view {view} (not computed yet)")
            continue
        at = upper - 1
        records = trace.state.records
        fraction = 1.0
        if sample_above is not None and records > sample_above:
            fraction = sample_above / records
        expected = recompute(rt, view, at)
        mismatch = compare(expected, trace.read_at((at,)), f"view {view}", at, fraction)
        sampled = f" (a {fraction:.1%} sample)" if fraction < 1.0 else ""
        report.checked.append(f"view {view} at epoch {at}{sampled}")
        if mismatch:
            report.mismatches.append(mismatch)
    if views is None:
        for name, node in pipeline.flow.sources.items():
            trace = rt.trace(node)
            trace.reload()
            position = read_position(trace)
            upper = epoch_of(trace.state.upper)
            if position is None or upper == 0:
                report.skipped.append(f"source {name} (nothing taken in yet)")
                continue
            snapshot = pipeline.readers[name].snapshot(position, node.schema)
            if snapshot is None:
                report.skipped.append(f"source {name} (the version read is no longer readable)")
                continue
            expected = snapshot.groupBy(*node.columns).agg(F.sum(DIFF).alias(DIFF))
            expected = expected.where(F.col(DIFF) != 0)
            mismatch = compare(expected, trace.read_at(None), f"source {name}", upper - 1)
            report.checked.append(f"source {name} at epoch {upper - 1}")
            if mismatch:
                report.mismatches.append(mismatch)
    return report
