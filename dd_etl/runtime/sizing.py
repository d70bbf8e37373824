"""Spark settings, and where the work runs, sized to the interval a run computes.

Spark's defaults are made for large data: adaptive query execution re-plans
after every exchange, and runs each exchange (shuffle or broadcast) as a Spark
job of its own, and plan statistics decide broadcasts. On the few hundred
changed rows of a typical epoch that turns every operator into a dozen jobs of
fixed cost and nothing to gain; and compiling each plan to Java code costs more
than interpreting it over a few thousand rows. A small interval therefore runs
with adaptive execution off, no automatic broadcasts, one shuffle partition and
no code generation. Its history lookups read only the rows of the keys the change
touched, in the driver (``trace/arrow_files.py``), rather than have Spark scan
whole files; the batches it appended are read back in the driver too, and every
read is one partition, so each trace's plan is one stage: no exchange, no file
listing or scan set-up per read. One Spark job computes the batches of all traces
of a layer, with no job counting them, and the driver writes them. A large
interval (an initial load, a backfill, a large change) keeps the session's own
settings, which are the right ones there, unless it is small beside the state
it touches (``LOOKUPS``: a change of 0.1 % of a large table): then each
operator looks up the history of the change's keys, executors read and write
everything, and adaptive execution is off, for its re-planning at every exchange
runs each exchange as a Spark job of its own and a lookup's keys are broadcast
by the plan anyway.

Which one applies to a run is decided from the trace logs alone (no Spark job):
the source records the run takes in, plus the sources a recomputed view reads in
full. A source's new data is sized by Spark's estimate of its plan before it is
taken in, and a view's sinks by the records of its trace, which bound both the
rows a materialized table is rewritten with and the changes a feed appends.
A layer of traces of a large interval is sized the same way, by the records its
traces read, as the logs of the traces below count them once those are written:
a load's aggregates over a few hundred groups run as a small layer, one Spark
job, not a dozen.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from pyspark.sql import SparkSession

from dd_etl.spark import conf_applied
from dd_etl.trace.driver_merge import DRIVER_MERGED_RECORDS
from dd_etl.trace.placement import BULK, DRIVER, LOOKUPS, Placement


@dataclass(frozen=True)
class Sizing:
    name: str
    placement: Placement
    """Where the interval's reads and writes run. In the driver's, history lookups
    read the touched keys' rows there, appended batches are read back there and
    every read is one partition, so each trace's plan runs as one stage; one Spark
    job computes the batches of a layer of traces, which the driver writes."""
    conf: Mapping[str, str] = field(default_factory=dict)
    write_tasks: int | None = None
    """How many tasks (at least) write a batch the trace logs do not bound by a
    million records, in the job that writes its layer's other batches, without a
    count of it first: a change small beside its state, whose batches are mostly
    small and where a count would be a job of its own. None: such a batch is
    counted and written alone, by as many tasks as its size calls for (a load,
    where counting costs little beside writing)."""

    @property
    def driver_rows(self) -> bool:
        return self.placement.driver


LOCAL_RELATION_THRESHOLD = "spark.sql.execution.arrow.localRelationThreshold"
LOCAL_RELATION_BYTES = 128 * 2**10
"""A local relation's rows cost time in every optimizer rule that rewrites
expressions (Catalyst walks each node's arguments, its rows among them) and in
serializing them into the task: at 10 M trips the optimizer took 0.21 s over
the layer of the first MIN/MAX level, 0.09 s with its large relations as RDDs
of Arrow batches (bench/README.md). Below this, a local relation's true size
and its emptiness are worth more to the optimizer."""


SMALL = Sizing(
    "small",
    DRIVER,
    {
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        # one-partition join inputs stay one partition up to any size Spark
        # estimates for them (its estimates of a join of joins pass even this)
        "spark.sql.maxSinglePartitionBytes": str(2**63 - 1),
        # a limited collect reads every partition in its first job, not one
        # partition and then, short of rows, the rest in another
        "spark.sql.limit.initialNumPartitions": "1000000",
        # driver rows past this many bytes of Arrow reach Spark as an RDD of Arrow
        # batches rather than a local relation, whose rows every optimizer rule
        # walks and every task carries serialized (``local_relations.py``)
        LOCAL_RELATION_THRESHOLD: str(LOCAL_RELATION_BYTES),
        # and Spark, which cannot size those, takes them for that large, not for
        # the default of 8 EB: else a join over them passes even the limit above
        # and is shuffled
        "spark.sql.defaultSizeInBytes": str(LOCAL_RELATION_BYTES),
        # no constraints inferred for every operator of every plan: the filters
        # they would add (``isnotnull``) or prune save nothing on a few thousand rows
        "spark.sql.constraintPropagation.enabled": "false",
        # a union of one-partition plans (the traces of a layer, computed by one
        # job) is as many partitions, a task each: else Spark zips their partitions
        # into one task, which holds the hash tables of every plan at once
        "spark.sql.unionOutputPartitioning": "false",
    },
)
LARGE = Sizing("large", BULK)


def medium(parallelism: int) -> Sizing:
    """The sizing of a change small beside its state, on Spark running ``parallelism``
    tasks at once: as many shuffle partitions, which adaptive execution no longer
    coalesces."""
    return Sizing(
        "medium",
        LOOKUPS,
        {
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.shuffle.partitions": str(parallelism),
            # the files a lookup reads are listed by the driver, not by a Spark job
            "spark.sql.sources.parallelPartitionDiscovery.threshold": str(2**31 - 1),
        },
        write_tasks=parallelism,
    )


PARQUET_BYTES_PER_RECORD = 8
"""About the fewest bytes of parquet a record takes (the benchmark's trips: 7.9 MB
per million), so that bytes over it bound the records from above."""


def records_at_most(estimated_bytes: int) -> int:
    """The most records Spark's estimate of a scan's bytes allows; 0 when Spark has
    no estimate (its default, ``Long.MaxValue``), which tells nothing."""
    if estimated_bytes >= 2**62:
        return 0
    return estimated_bytes // PARQUET_BYTES_PER_RECORD


@dataclass(frozen=True)
class Thresholds:
    """The sizes that choose where a run's work happens: in the driver, on the
    executors by lookups, or by Spark's own plans. The defaults were measured
    (bench/README.md); a pipeline may set them (``sizing:`` in its file), above all
    lower, so that small data takes the paths of large data (a test of a Spark
    Connect server or a cluster does)."""

    small_records: int = 20_000
    """Up to this many source records read, a run is sized as small; a Delta
    source's change feed of up to this many rows is read by the driver. Measured
    on the benchmark dataflow: 140,000 update rows took 26 to 31 s as a small
    interval and 14 s as a large one."""
    small_bytes: int = 2 * 2**20
    """Up to this many bytes (Spark's estimate of a plan: file sizes for a scan) a
    source's new data is taken in as a small interval. A few hundred changed rows
    are kilobytes; 20,000 records of a few columns are about a megabyte of parquet."""
    medium_share: float = 0.25
    """An interval taking in at most this share of the records its dataflow's
    traces hold (and more than a small one) is sized medium: a change to a large
    table."""
    driver_merge_records: int = DRIVER_MERGED_RECORDS
    """A spine merge step reading at most this many records is made by the driver,
    a larger one by Spark."""
    rewrite_records: int = 25_000_000
    """A materialized table of a view holding at most this many records is
    rewritten whole at each epoch that changed it; a larger one takes the view's
    changes (a Delta MERGE): a MERGE of 1,000 rows took 3-4.5 s when they lay in a
    narrow key range, 5-9 s when spread over a table of 1-100 M rows, and
    rewriting 10 M rows took 3-3.7 s, 100 M 27-28 s (``bench/bench_sink.py``)."""
    store_rewrite_bytes: int = 16 * 2**20
    """On an object store a materialized table is rewritten whole only while its
    files hold at most this many bytes: a store charges, and its network carries,
    every byte an epoch writes, so a larger table takes the view's changes and
    writes what they need (kilobytes for 1,000 changed rows). On a local S3 server
    a MERGE of 1,000 rows took 2-4 s where rewriting 1 M rows (2.2 MB) took
    0.4-0.8 s (``bench/bench_sink.py --object-storage``)."""

    def for_records(self, records: int, state: int = 0, parallelism: int = 1) -> Sizing:
        """The sizing of an interval taking in ``records``, beside the ``state``
        records the traces it touches hold (0: none, or not known), on Spark
        running ``parallelism`` tasks at once."""
        if records <= self.small_records:
            return SMALL
        return medium(parallelism) if records <= self.medium_share * state else LARGE

    def rewrites_whole(self, records: int, stored_bytes: int | None) -> bool:
        """Whether a materialized table of a view of ``records`` is rewritten whole
        at an epoch that changed it, given the bytes its files hold on an object
        store (None: on a local disk, where rewriting costs time alone)."""
        if stored_bytes is not None and stored_bytes > self.store_rewrite_bytes:
            return False
        return records <= self.rewrite_records

    def for_bytes(self, estimated: int) -> Sizing:
        return SMALL if estimated <= self.small_bytes else LARGE


DEFAULT_THRESHOLDS = Thresholds()


def applied(spark: SparkSession, sizing: Sizing) -> AbstractContextManager[None]:
    """The session's SQL settings as ``sizing`` wants them for the block, restored
    after. (They are read when a query is planned, so concurrent runs in one
    session must share a sizing.)"""
    return conf_applied(spark, sizing.conf)
