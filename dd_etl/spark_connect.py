"""A Spark Connect server on this machine, set up as dd_etl's own sessions are.

Spark Connect (``sc://host:port``) is Spark 4's client-server mode: the driver is
a long-lived server process and a client holds no JVM. A pipeline names one with
``spark: {remote: ...}`` (or ``DD_ETL_SPARK_REMOTE``); the server must then have
what a session dd_etl starts itself has: Delta's jars and SQL extension, and the
static settings a client cannot change (``spark.DEFAULT_CONF``'s Hadoop and
code-generation ones). ``server_command`` is the command that starts one with
them, from the Spark that PySpark ships;

    python -m dd_etl.spark_connect start STATE_DIR [--port 15002] [--master local[*]]
    python -m dd_etl.spark_connect stop STATE_DIR

starts one in the background (printing its ``sc://`` URL once it listens) and
stops it. PySpark ships the server's jar but not Spark's
``sbin/start-connect-server.sh``, which is this same ``spark-submit``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from dd_etl import delta_jars, s3_jars
from dd_etl.spark import DEFAULT_CONF, DRIVER_GC
from dd_etl.spark_memory import driver_memory as driver_memory_of

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002
"""Spark Connect's own default port."""
START_SECONDS = 120.0


def server_command(
    port: int = DEFAULT_PORT,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    driver_memory: str | None = None,
    delta: bool = True,
    *,
    object_storage: bool = False,
) -> list[str]:
    """``spark-submit`` starting a Spark Connect server on ``port`` with Delta and
    dd_etl's settings (``conf`` added to them), and ``driver_memory`` (default:
    sized to the machine, as a pipeline's own Spark is). ``delta=False`` leaves
    out Delta's jars and extension, as a server started elsewhere may: dd_etl
    must name what such a server lacks. ``object_storage`` adds the jars of the
    ``s3a://`` filesystem (``s3_jars``)."""
    jars = delta_jars.spark_options() if delta else {}
    if object_storage:
        jars = s3_jars.with_jars(jars)
    settings = {
        **DEFAULT_CONF,
        **jars,
        "spark.driver.extraJavaOptions": DRIVER_GC,
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.catalogImplementation": "in-memory",
        **(conf or {}),
    }
    memory = driver_memory or driver_memory_of(settings).value
    command = [str(_spark_home() / "bin" / "spark-submit"), "--master", master]
    command += ["--driver-memory", memory, "--name", "dd_etl-connect", "--class", SERVER_CLASS]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return command


def start(
    state: Path,
    port: int = DEFAULT_PORT,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    driver_memory: str | None = None,
    timeout: float = START_SECONDS,
    delta: bool = True,
    python: str | None = None,
    *,
    object_storage: bool = False,
) -> str:
    """Start a server in the background, its pid and log in ``state``; return its
    URL once it listens. Its Python workers (for ``mapInArrow``) run ``python``,
    else ``PYSPARK_PYTHON``, else this interpreter, with its packages; ``delta``
    and ``object_storage`` as ``server_command`` takes them."""
    state.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "PYSPARK_PYTHON": python or os.environ.get("PYSPARK_PYTHON", sys.executable),
    }
    log = state / "connect.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            server_command(port, master, conf, driver_memory, delta, object_storage=object_storage),
            cwd=state,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (state / "connect.pid").write_text(str(process.pid))
    deadline = time.monotonic() + timeout
    while not listening(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(state)
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"the Spark Connect server did not start; its log:\n{tail}")
        time.sleep(0.25)
    return f"sc://localhost:{port}"


def stop(state: Path, timeout: float = 30.0) -> None:
    """Stop the server started in ``state``, if it runs: SIGTERM, then SIGKILL."""
    pid_file = state / "connect.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    pid_file.unlink()
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _running(pid):
                return
            time.sleep(0.1)


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs; reaped if it is this process's child (a child
    that exited stays a zombie, which ``kill(pid, 0)`` finds)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:  # another process's: started by another command
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def listening(port: int, host: str = "localhost") -> bool:
    """Whether something accepts connections on ``port`` (a Connect client dialling
    a port no server listens on waits for one instead of failing)."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dd_etl.spark_connect")
    parser.add_argument("command", choices=["start", "stop"])
    parser.add_argument("state", type=Path)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory")
    args = parser.parse_args(argv)
    if args.command == "start":
        print(start(args.state, args.port, args.master, driver_memory=args.driver_memory))
    else:
        stop(args.state)


if __name__ == "__main__":
    main()
