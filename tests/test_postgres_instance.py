"""infra/dagster.yaml loads as a Dagster instance backed by a real PostgreSQL server."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from tests.support.postgres_server import PostgresServer, postgres_server

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
INSTANCE_YAML = ROOT / "infra" / "dagster.yaml"


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    with postgres_server() as server:
        yield server


@dg.op
def answer() -> int:
    return 42


@dg.job(tags={"dd_etl/pipeline": "smoke"})
def smoke() -> None:
    answer()


def test_instance_yaml_stores_runs_in_postgres(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster_postgres import (
        PostgresEventLogStorage,
        PostgresRunStorage,
        PostgresScheduleStorage,
    )

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(INSTANCE_YAML, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_PG_USERNAME", postgres.user)
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", postgres.password)
    monkeypatch.setenv("DAGSTER_PG_HOST", postgres.host)
    monkeypatch.setenv("DAGSTER_PG_DB", postgres.db)
    monkeypatch.setenv("DAGSTER_PG_PORT", str(postgres.port))

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)

        coordinator = instance.run_coordinator
        assert isinstance(coordinator, dg.QueuedRunCoordinator)
        limits = instance.get_concurrency_config().run_queue_config
        assert limits is not None
        assert {
            "key": "dd_etl/pipeline",
            "value": {"applyLimitPerUniqueValue": True},
            "limit": 1,
        } in limits.tag_concurrency_limits
        assert {
            "key": "dd_etl/kind",
            "value": "maintenance",
            "limit": 1,
        } in limits.tag_concurrency_limits

        result = smoke.execute_in_process(instance=instance)
        assert result.success
        assert result.output_for_node("answer") == 42

        runs = instance.get_runs(filters=dg.RunsFilter(job_name="smoke"))
        assert [r.run_id for r in runs] == [result.run_id]
        assert runs[0].status == dg.DagsterRunStatus.SUCCESS
        assert runs[0].tags["dd_etl/pipeline"] == "smoke"
        assert instance.all_logs(result.run_id), "events went to the Postgres event log"
