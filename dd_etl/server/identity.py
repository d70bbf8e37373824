"""Which server a command may use, and where it listens.

A server serves a command only if it runs the code and settings the command's own
process would: the same interpreter, the same dd_etl sources and installed packages,
and the same environment for starting Spark. All of it goes into a digest that
names the server's socket, so a changed file or setting simply finds no server and
starts a new one (the old one leaves when idle). The Spark settings a pipeline asks
for are checked by the server itself (``dd_etl.spark.settings_must_match``).
"""

from __future__ import annotations

import hashlib
import os
import site
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import dd_etl

SERVER_ENV = "DD_ETL_SERVER"
"""``off`` (or ``0``, ``false``, ``no``): every command runs in its own process."""
DIRECTORY_ENV = "DD_ETL_SERVER_DIR"
"""Where servers keep their sockets, locks and logs (default: under the user's runtime
or cache directory)."""
IDLE_ENV = "DD_ETL_SERVER_IDLE"
"""Seconds a server waits for its next command before it exits (default 900)."""
DEFAULT_IDLE_SECONDS = 900.0

SPARK_ENVIRONMENT = ("DD_ETL_SPARK", "DD_ETL_JVM", "SPARK_", "PYSPARK_", "JAVA_", "HADOOP_", "JDK_")
"""Prefixes of the variables Spark's start reads (its master, JVM, archive, jars)."""
SPARK_VARIABLES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")
"""Variables that decide which ``java``, packages and native libraries are found."""
PACKAGE = str(Path(dd_etl.__file__).parent)


@dataclass(frozen=True)
class Server:
    """The files of the server for one digest."""

    directory: Path
    digest: str

    @property
    def socket(self) -> Path:
        return self.directory / f"{self.digest}.sock"

    @property
    def lock(self) -> Path:
        return self.directory / f"{self.digest}.lock"

    @property
    def log(self) -> Path:
        return self.directory / f"{self.digest}.log"


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(SERVER_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


def idle_seconds(env: Mapping[str, str]) -> float:
    return float(env.get(IDLE_ENV) or DEFAULT_IDLE_SECONDS)


def directory(env: Mapping[str, str]) -> Path:
    """Private to the user (mode 0700): whoever can reach a socket runs commands."""
    configured = env.get(DIRECTORY_ENV)
    if configured:
        path = Path(configured)
    elif env.get("XDG_RUNTIME_DIR"):
        path = Path(env["XDG_RUNTIME_DIR"]) / "dd_etl"
    else:
        path = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dd_etl" / "server"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def sockets(directory: Path) -> list[Path]:
    """The sockets of every server in ``directory``, listening or left by a dead one."""
    return sorted(directory.glob("*.sock"))


def server_for(env: Mapping[str, str]) -> Server:
    return Server(directory(env), digest(env))


def installation() -> str:
    """The interpreter and dd_etl package a server runs: servers of the same
    installation replace each other as code changes."""
    return f"{os.path.realpath(sys.executable)}:{PACKAGE}"


def digest(env: Mapping[str, str]) -> str:
    """A digest of what a command's process would run: dd_etl's sources (names,
    sizes, times), the directories packages are installed in (an install changes
    them; ``PYTHONPATH`` counts as environment), and Spark's environment."""
    h = hashlib.sha256(installation().encode())
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            stat = os.stat(os.path.join(root, name))
            h.update(f"{root}/{name}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    for entry in [*site.getsitepackages(), site.getusersitepackages()]:
        try:
            h.update(f"{entry}:{os.stat(entry).st_mtime_ns}\0".encode())
        except OSError:
            h.update(f"{entry}:-\0".encode())
    for key in sorted(env):
        if key.startswith(SPARK_ENVIRONMENT) or key in SPARK_VARIABLES:
            h.update(f"{key}={env[key]}\0".encode())
    return h.hexdigest()[:20]
