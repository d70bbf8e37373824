"""The server that keeps Spark between ``dd-etl`` commands, with real processes: a
command run by it behaves as one run in its own process (streams, exit statuses,
the user's Python views imported afresh), a server killed in the middle of a run
or by its client going away loses nothing, a command asking for other Spark
settings gets a server of its own, one too large for a quick-compiling JVM starts
over on a fully compiling one, and an idle server exits."""

from __future__ import annotations

import csv
import io
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dd_etl import spark
from dd_etl.errors import ConfigError
from dd_etl.runtime.sizing import records_at_most
from dd_etl.server import client, identity, protocol
from tests.support.child_process import alive
from tests.support.pipeline_fixtures import VIEWS_MODULE, bag, change_data, oracle, write_pipeline

ROOT = Path(__file__).resolve().parent.parent


def test_a_message_carries_the_callers_streams() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX)
    read_end, write_end = os.pipe()
    with ours, theirs:
        protocol.send(ours, {"kind": "command", "args": ["run"]}, [write_end])
        message, fds = protocol.receive(theirs, max_fds=3)
        os.write(fds[0], b"to the caller")
        os.close(fds[0])
    os.close(write_end)
    assert message == {"kind": "command", "args": ["run"]}
    assert os.read(read_end, 100) == b"to the caller"
    os.close(read_end)


@pytest.mark.parametrize(
    ("args", "served"),
    [
        (["run", "p.yaml"], True),
        (["trace", "compact", "t"], True),
        (["--debug", "run", "p.yaml"], False),  # Spark's own lines need a Spark of its own
        (["ui", "p.yaml"], False),
        (["server", "status"], False),
        (["--help"], False),
    ],
)
def test_which_commands_a_server_runs(
    args: list[str], served: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(identity.SERVER_ENV, "on")
    assert client.served(args) is served
    monkeypatch.setenv(identity.SERVER_ENV, "off")
    assert not client.served(args)


def test_the_digest_follows_the_spark_environment_only() -> None:
    env = {"HOME": "/home/a", "DD_ETL_SPARK_MASTER": "local[1]"}
    assert identity.digest(env) == identity.digest({**env, "HOME": "/home/b", "COLUMNS": "80"})
    assert identity.digest(env) != identity.digest({**env, "DD_ETL_SPARK_MASTER": "local[2]"})
    assert identity.digest(env) != identity.digest({**env, "JAVA_HOME": "/opt/jdk"})


def test_a_command_moves_to_a_fully_compiling_jvm_only_before_it_did_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spark._Spark, "compiler", "quick")
    monkeypatch.setenv(spark.QUICK_RECORDS_ENV, "100")
    spark.command_movable(True)
    try:
        spark.full_compiler_for(100)  # within the quick JVM's limit: runs here
        with pytest.raises(spark.NeedsFullCompiler):
            spark.full_compiler_for(101)
        spark.command_movable(False)  # a tick done: starting over would repeat it
        spark.full_compiler_for(10**9)
        spark.command_movable(True)
        monkeypatch.setattr(spark._Spark, "compiler", "full")
        spark.full_compiler_for(10**9)
        monkeypatch.setenv(spark.QUICK_RECORDS_ENV, "many")
        with pytest.raises(ConfigError, match="DD_ETL_JVM_QUICK_RECORDS: 'many' is not a number"):
            spark.quick_records()
    finally:
        spark.command_movable(False)
    # Spark's estimate of a scan bounds its records; its default says nothing
    assert records_at_most(16 * 2**20) == 2 * 2**20
    assert records_at_most(2**63 - 1) == 0


@pytest.mark.slow
def test_commands_on_a_server_behave_as_in_their_own_process(tmp_path: Path) -> None:
    servers = tmp_path / "servers"
    env = {
        **os.environ,
        identity.SERVER_ENV: "on",
        identity.DIRECTORY_ENV: str(servers),
        "PYTHONPATH": str(ROOT),
    }

    def dd_etl(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dd_etl.cli", *args],
            cwd=tmp_path,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=600,
        )

    def server() -> dict[str, object] | None:
        return client.ask(identity.server_for(env).socket, {"kind": "status"})

    pipeline = write_pipeline(tmp_path, "served_views")
    change_data(tmp_path, 0)
    ran = dd_etl("run", str(pipeline))
    assert ran.returncode == 0, ran.stderr
    assert "ran epoch 0" in ran.stderr
    first = server()
    assert first is not None and first["commands"] == 1
    assert first["compiler"] == "quick"

    read = dd_etl("read", str(pipeline), "zoned", "--format", "csv")
    assert read.returncode == 0, read.stderr
    assert read.stderr == ""  # standard output carries the CSV and nothing else
    rows = [{"borough": r["borough"], "trip_id": int(r["trip_id"])} for r in _csv(read.stdout)]
    assert bag(rows) == oracle(tmp_path, "zoned")

    unknown = dd_etl("read", str(pipeline), "nosuch")
    assert unknown.returncode == 2
    assert "unknown view 'nosuch'" in unknown.stderr
    again = server()
    assert again is not None and again["pid"] == first["pid"] and again["commands"] == 3

    # killed at a failpoint in the middle of its run: the caller is told, the next
    # command gets a new server, which completes the epoch
    change_data(tmp_path, 1)
    killed = dd_etl("run", str(pipeline), DD_ETL_FAILPOINTS="append.committed=1")
    assert killed.returncode == client.INTERRUPTED, killed.stderr
    assert "server stopped during the command" in killed.stderr
    assert server() is None
    resumed = dd_etl("run", str(pipeline))
    assert resumed.returncode == 0, resumed.stderr
    assert "completed interrupted epoch 1" in resumed.stderr

    # its client killed in the middle of a run: the server goes with it
    change_data(tmp_path, 2)
    pid = _pid(server())
    log = identity.server_for(env).log
    running = log.read_text().count("running")
    caller = subprocess.Popen(
        [sys.executable, "-m", "dd_etl.cli", "run", str(pipeline)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for(lambda: log.read_text().count("running") > running)
    caller.kill()
    caller.wait()
    _wait_for(lambda: not alive(pid))
    resumed = dd_etl("run", str(pipeline))
    assert resumed.returncode == 0, resumed.stderr
    for view in ("by_pc", "zoned"):
        got = dd_etl("read", str(pipeline), view, "--format", "csv")
        assert bag(_typed(_csv(got.stdout))) == oracle(tmp_path, view), view

    # a run too large for the quick compiler starts over, before it took anything
    # in, on a server whose JVM compiles fully
    change_data(tmp_path, 3)
    few = {spark.QUICK_RECORDS_ENV: "1"}  # another digest: a server of its own
    moved = dd_etl("run", str(pipeline), **few)
    assert moved.returncode == 0, moved.stderr
    assert "ran epoch 3" in moved.stderr
    full = client.ask(identity.server_for({**env, **few}).socket, {"kind": "status"})
    assert full is not None and full["compiler"] == "full" and full["commands"] == 1
    assert "starts over on a full server" in identity.server_for({**env, **few}).log.read_text()
    for view in ("by_pc", "zoned"):
        got = dd_etl("read", str(pipeline), view, "--format", "csv")
        assert bag(_typed(_csv(got.stdout))) == oracle(tmp_path, view), view

    # the user's Python views are imported afresh: a changed definition is seen
    (tmp_path / "served_views.py").write_text(
        VIEWS_MODULE.replace('tables["trips"].count', 'tables["trips"].distinct().count')
    )
    changed = dd_etl("run", str(pipeline))
    assert changed.returncode == 0, changed.stderr
    assert "rebuilt by_pc: its definition changed" in changed.stderr

    # other Spark settings (no pipeline's): a server of their own, which leaves
    # when idle
    pid = _pid(server())
    trace = next((tmp_path / "warehouse").glob("sources/*"))
    compact = dd_etl("trace", "compact", str(trace), DD_ETL_SERVER_IDLE="2")
    assert compact.returncode == 0, compact.stderr
    assert _pid(server()) != pid
    _wait_for(lambda: not alive(pid))
    _wait_for(lambda: server() is None)


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _typed(rows: list[dict[str, str]]) -> list[dict[str, object]]:
    return [{k: int(v) if v.isdigit() else (v or None) for k, v in r.items()} for r in rows]


def _pid(status: dict[str, object] | None) -> int:
    assert status is not None
    return int(str(status["pid"]))


def _wait_for(condition: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
