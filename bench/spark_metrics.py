"""The Spark work of a timed block: jobs, stages, bytes read and written.

A block's seconds say how long it took; its jobs and bytes say what Spark did
for it, and so why. Two sources, one answer:

* ``SessionJobs``: a block run by the benchmark's own (classic) SparkSession.
  Spark numbers jobs in the order they are submitted, so the block's jobs are
  the ids handed out while it ran, whichever thread or job group launched them
  (a dd_etl run labels its jobs with job groups of its own, one per trace, so a
  job group set around it would not find them). Their stages and metrics come
  from the status tracker and the status store, which serve them whether the
  UI is on or not.
* ``UiJobs``: a block run by another Spark application, here the Spark Connect
  server that runs a declarative pipeline: its jobs and stages as that
  application's UI REST API (``/api/v1/applications/<app>/jobs`` and
  ``/stages``) lists them.

Both read what Spark's status listener recorded, which it learns from events
posted after the jobs ran: each waits until the listener has caught up, so a
block's last job is not missed. Measuring happens outside the timed block.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from pyspark.sql import SparkSession

T = TypeVar("T")


@dataclass(frozen=True)
class SparkWork:
    """What Spark did for a block. Stages count every stage of every job, skipped
    ones too (a stage whose shuffle output an earlier job left is listed again,
    and skipped), as ``RunProfile.spark_stages`` does; bytes are summed over the
    distinct stages, each at its last attempt."""

    spark_jobs: int
    spark_stages: int
    skipped_stages: int
    bytes_read: int
    """Input bytes: what the stages' tasks read from files (and in-memory sources).
    Parquet's vectored reads would hide most of it; dd_etl's sessions (and the SDP
    server, which takes their settings) read without them."""
    bytes_written: int
    """Output bytes: what the stages' tasks wrote to files (not the ``noop`` sink)."""
    shuffle_read_bytes: int
    shuffle_write_bytes: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)


class JobCounter(Protocol):
    def mark(self) -> int:
        """A position in the application's jobs: every later job is after it."""
        ...

    def since(self, mark: int) -> SparkWork:
        """The work of the jobs launched after ``mark`` (all of them finished)."""
        ...


def measured(counter: JobCounter, block: Callable[[], T]) -> tuple[T, float, SparkWork]:
    """Run ``block``: its result, its seconds (rounded to ms) and its Spark work."""
    mark = counter.mark()
    started = time.perf_counter()
    result = block()
    seconds = round(time.perf_counter() - started, 3)
    return result, seconds, counter.since(mark)


def _work(
    jobs: Iterable[list[int]], stage: Callable[[int], tuple[str, int, int, int, int] | None]
) -> SparkWork:
    """Sum ``stage(id) = (status, input, output, shuffle read, shuffle write)`` over
    the jobs' stage ids (``None`` for a stage the status store no longer keeps)."""
    per_job = list(jobs)
    ids = {s for stages in per_job for s in stages}
    metrics = {s: stage(s) for s in ids}
    known = [m for m in metrics.values() if m is not None]
    return SparkWork(
        spark_jobs=len(per_job),
        spark_stages=sum(len(stages) for stages in per_job),
        skipped_stages=sum(
            1
            for stages in per_job
            for s in stages
            if (m := metrics[s]) is not None and m[0] == "SKIPPED"
        ),
        bytes_read=sum(m[1] for m in known),
        bytes_written=sum(m[2] for m in known),
        shuffle_read_bytes=sum(m[3] for m in known),
        shuffle_write_bytes=sum(m[4] for m in known),
    )


class SessionJobs:
    """Jobs of the benchmark's own SparkSession, by job id.

    The job ids come from the DAG scheduler's counter and the listener is waited
    for through the listener bus: both are Spark internals reached over py4j
    (``private[spark]`` in Scala, public to the JVM); the session must keep
    enough jobs in its status store (``spark.ui.retainedJobs``/``retainedStages``,
    set by ``spark_session(count_jobs=True)``)."""

    def __init__(self, spark: SparkSession) -> None:
        sc = spark.sparkContext._jsc.sc()
        self._sc = sc
        self._tracker = spark.sparkContext._jsc.statusTracker()
        self._store = sc.statusStore()

    def _next_job(self) -> int:
        self._sc.listenerBus().waitUntilEmpty()
        counter = self._sc.dagScheduler().nextJobId()
        return int(counter if isinstance(counter, int) else counter.get())

    def mark(self) -> int:
        return self._next_job()

    def since(self, mark: int) -> SparkWork:
        jobs = []
        for job in range(mark, self._next_job()):
            info = self._tracker.getJobInfo(job)
            jobs.append([] if info is None else [int(s) for s in info.stageIds()])
        return _work(jobs, self._stage)

    def _stage(self, stage: int) -> tuple[str, int, int, int, int] | None:
        try:
            s = self._store.lastStageAttempt(stage)
        except Exception:  # py4j's error for a stage the store dropped
            return None
        return (
            str(s.status().toString()),
            int(s.inputBytes()),
            int(s.outputBytes()),
            int(s.shuffleReadBytes()),
            int(s.shuffleWriteBytes()),
        )


class UiJobs:
    """Jobs of another Spark application, read from its UI's REST API.

    ``marker(tag)`` must run one small job in that application carrying the job
    tag ``tag`` (for Spark Connect: ``SparkSession.addTag``). The status listener
    handles events in order, so once the REST API lists the marker job as done it
    lists every job submitted before it, done, with its stages' final metrics:
    the marker bounds a block on both sides, without waiting for guessed delays."""

    def __init__(self, ui_url: str, marker: Callable[[str], None], timeout: float = 60.0) -> None:
        self._api = f"{ui_url.rstrip('/')}/api/v1/applications"
        self._marker = marker
        self._timeout = timeout
        self._markers = 0
        self._app: str | None = None

    def _get(self, path: str) -> Any:
        if self._app is None:
            with urllib.request.urlopen(self._api, timeout=self._timeout) as response:
                self._app = str(json.load(response)[0]["id"])
        url = f"{self._api}/{self._app}/{path}"
        with urllib.request.urlopen(url, timeout=self._timeout) as response:
            return json.load(response)

    def _settled(self) -> tuple[int, list[dict[str, Any]]]:
        """Run a marker job, wait until the REST API lists it done: its id and the jobs."""
        self._markers += 1
        tag = f"bench-marker-{self._markers}"
        self._marker(tag)
        deadline = time.monotonic() + self._timeout
        while True:
            jobs: list[dict[str, Any]] = self._get("jobs")
            for job in jobs:
                tags = job.get("jobTags") or []
                marked = any(t == tag or t.endswith(f"_Tag_{tag}") for t in tags)
                if marked and job["status"] not in ("RUNNING", "UNKNOWN"):
                    return int(job["jobId"]), jobs
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Spark UI at {self._api} never listed job tag {tag}")
            time.sleep(0.05)

    def mark(self) -> int:
        return self._settled()[0]

    def since(self, mark: int) -> SparkWork:
        end, jobs = self._settled()
        chosen = sorted(
            (j for j in jobs if mark < int(j["jobId"]) < end), key=lambda j: int(j["jobId"])
        )
        stages: dict[int, tuple[int, tuple[str, int, int, int, int]]] = {}
        for s in self._get("stages"):
            sid, attempt = int(s["stageId"]), int(s["attemptId"])
            if sid not in stages or attempt > stages[sid][0]:
                stages[sid] = (
                    attempt,
                    (
                        str(s["status"]),
                        int(s.get("inputBytes", 0)),
                        int(s.get("outputBytes", 0)),
                        int(s.get("shuffleReadBytes", 0)),
                        int(s.get("shuffleWriteBytes", 0)),
                    ),
                )
        return _work(
            ([int(s) for s in j["stageIds"]] for j in chosen),
            lambda sid: stages[sid][1] if sid in stages else None,
        )
