"""A schedule less frequent than the server's idle time still meets a warm Spark: each
evaluation of the tick schedule (a run or a skip) tells the dd_etl server when the
next tick is due, and the server's idle time counts from then. The Dagster run that
carries the due time to the server is tested in ``test_dagster_server``."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import dagster as dg
import pytest

from dd_etl.dagster import pipeline_definitions
from dd_etl.dagster.names import PIPELINE_TAG, WARM_UNTIL_TAG
from dd_etl.server import client, identity
from tests.support.child_process import alive
from tests.support.pipeline_fixtures import change_data, write_pipeline

HOURLY = "0 * * * *"
ELEVEN = datetime.datetime(2026, 11, 28, 11, 0, tzinfo=datetime.UTC)
NOON = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC).timestamp()


@pytest.fixture
def server_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> identity.Server:
    """Servers on, in a directory of this test's, idle after one second."""
    monkeypatch.setenv(identity.SERVER_ENV, "on")
    monkeypatch.setenv(identity.DIRECTORY_ENV, str(tmp_path / "servers"))
    monkeypatch.setenv(identity.IDLE_ENV, "1")
    return identity.server_for(os.environ)


def _start(files: identity.Server) -> int:
    """A server with no command yet (so no Spark): its pid."""
    connection = client.start(files)
    assert connection is not None
    connection.close()
    status = client.ask(files.socket, {"kind": "status"})
    assert status is not None and status["master"] is None
    return int(status["pid"])


def test_a_server_told_of_the_next_tick_stays_until_it_is_due(
    server_env: identity.Server,
) -> None:
    pid = _start(server_env)
    due = time.time() + 5
    status = client.keep_warm(due)
    assert status is not None and status["warm_until"] == due
    time.sleep(3)  # idle for longer than its idle time, but the tick is not due yet
    assert alive(pid) and client.ask(server_env.socket, {"kind": "status"}) is not None
    deadline = time.monotonic() + 60
    while alive(pid):
        assert time.monotonic() < deadline, "the server stayed past its idle time"
        time.sleep(0.05)
    assert time.time() >= due + 1  # its idle time, counted from the due time


def test_each_schedule_evaluation_says_when_the_next_tick_is_due(
    tmp_path: Path, server_env: identity.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(identity.IDLE_ENV, "60")  # it stays while the test looks
    pipeline = write_pipeline(tmp_path, "warm_views")
    change_data(tmp_path, 0)
    definitions = pipeline_definitions([pipeline], tick_cron=HOURLY)
    schedule = definitions.resolve_schedule_def("e2e_tick_schedule")
    with dg.instance_for_test() as instance:

        def evaluate() -> list[dg.RunRequest]:
            context = dg.build_schedule_context(instance, scheduled_execution_time=ELEVEN)
            return list(schedule.evaluate_tick(context).run_requests or [])

        # new data: a run, tagged for its step to tell the server (none runs yet)
        (request,) = evaluate()
        assert float(request.tags[WARM_UNTIL_TAG]) == NOON
        assert request.tags["dd_etl/reason"] == "source trips has new data"

        # skipped while a tick runs: the running server is told directly
        pid = _start(server_env)
        tick = definitions.resolve_job_def("e2e_tick")
        instance.create_run_for_job(tick, tags={PIPELINE_TAG: "e2e"})
        assert evaluate() == []
        status = client.ask(server_env.socket, {"kind": "status"})
        assert status is not None and status["pid"] == pid and status["warm_until"] == NOON
        client.ask(server_env.socket, {"kind": "stop"})
