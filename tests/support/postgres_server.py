"""A throwaway PostgreSQL server for tests: a fresh cluster in a temporary directory.

``postgres_server()`` runs ``initdb`` in a new directory, starts the server on a free
port of 127.0.0.1 (no unix sockets, trust authentication), creates a database, waits
until it accepts connections, and on exit stops the server and removes the directory.
The server binaries come from ``PATH`` or the newest ``/usr/lib/postgresql/*/bin``.
``initdb`` and ``postgres`` refuse to run as root, so as root they run as the
``postgres`` OS user, in a directory that user owns.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

HOST = "127.0.0.1"
SERVICE_USER = "postgres"
DEFAULT_USER = "dagster"
DEFAULT_DB = "dagster_test"
READY_TIMEOUT_S = 30.0
DEBIAN_BIN_DIRS = "/usr/lib/postgresql"


class PostgresUnavailableError(RuntimeError):
    """The PostgreSQL server cannot be started on this machine (something is missing)."""


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    user: str
    password: str
    db: str

    @property
    def url(self) -> str:
        userinfo = quote(self.user, safe="")
        if self.password:
            userinfo += ":" + quote(self.password, safe="")
        return f"postgresql://{userinfo}@{self.host}:{self.port}/{self.db}"


@dataclass(frozen=True)
class _RunAs:
    """Whom the server programs run as: ``None`` for the current user."""

    uid: int | None = None
    gid: int | None = None


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name))


def find_bin_dir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl``, ``postgres``: ``initdb`` on ``PATH``
    (symlinks resolved) or else the newest ``/usr/lib/postgresql/<version>/bin``."""
    on_path = shutil.which("initdb")
    candidates: list[Path] = []
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    root = Path(DEBIAN_BIN_DIRS)
    if root.is_dir():
        versions = sorted((p for p in root.iterdir() if p.is_dir()), key=_version_key)
        candidates.extend(p / "bin" for p in reversed(versions))
    for bin_dir in candidates:
        missing = [n for n in ("initdb", "pg_ctl", "postgres") if not (bin_dir / n).is_file()]
        if not missing:
            return bin_dir
    raise PostgresUnavailableError(
        "PostgreSQL server binaries not found: need initdb, pg_ctl and postgres on PATH or "
        f"under {DEBIAN_BIN_DIRS}/<version>/bin (Debian/Ubuntu: apt-get install postgresql)"
    )


def _client(bin_dir: Path, name: str) -> str:
    beside = bin_dir / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise PostgresUnavailableError(
            f"PostgreSQL client program {name!r} not found in {bin_dir} or on PATH "
            "(Debian/Ubuntu: apt-get install postgresql-client)"
        )
    return found


def _run_as() -> _RunAs:
    if os.geteuid() != 0:
        return _RunAs()
    try:
        entry = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise PostgresUnavailableError(
            f"running as root, and initdb/postgres refuse to run as root, but there is no "
            f"{SERVICE_USER!r} OS user to run them as (create it, e.g. "
            f"useradd --system {SERVICE_USER}, or run the tests as a non-root user)"
        ) from None
    return _RunAs(uid=entry.pw_uid, gid=entry.pw_gid)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _clean_env() -> dict[str, str]:
    # PGDATA, PGPORT, PGHOST, ... of the caller must not leak into the throwaway server.
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _run(
    args: Sequence[str],
    *,
    run_as: _RunAs,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        list(args),
        cwd=cwd,
        env=dict(env),
        user=run_as.uid,
        group=run_as.gid,
        extra_groups=[] if run_as.uid is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited with {result.returncode}:\n{result.stdout}{result.stderr}"
        )
    return result


def _wait_ready(pg_isready: str, port: int, user: str, env: Mapping[str, str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        probe = subprocess.run(
            [pg_isready, "-h", HOST, "-p", str(port), "-U", user, "-d", "postgres", "-t", "2"],
            env=dict(env),
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"PostgreSQL on {HOST}:{port} not ready after {READY_TIMEOUT_S:.0f}s: "
                f"{probe.stdout}{probe.stderr}"
            )
        time.sleep(0.2)


def _log_tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-30:])
    except OSError:
        return "(no server log)"


@contextmanager
def postgres_server(user: str = DEFAULT_USER, db: str = DEFAULT_DB) -> Iterator[PostgresServer]:
    """Start a fresh PostgreSQL cluster on a free port of 127.0.0.1; stop and delete it
    on exit. Authentication is ``trust``: the password is empty."""
    bin_dir = find_bin_dir()
    psql = _client(bin_dir, "psql")
    pg_isready = _client(bin_dir, "pg_isready")
    run_as = _run_as()
    env = _clean_env()

    # Not pytest's tmp_path: it is mode 700 and root's, out of the service user's reach.
    base = Path(tempfile.mkdtemp(prefix="dd_etl-postgres-"))
    if run_as.uid is not None and run_as.gid is not None:
        os.chown(base, run_as.uid, run_as.gid)
    base.chmod(0o700)
    if run_as.uid is not None:
        reachable = subprocess.run(["test", "-w", str(base)], user=run_as.uid, check=False)
        if reachable.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            raise PostgresUnavailableError(
                f"the {SERVICE_USER!r} OS user cannot write {base}: a parent directory is "
                "closed to it (point TMPDIR at a directory it can reach, e.g. /tmp)"
            )
    data = base / "data"
    log = base / "postgres.log"
    pg_ctl = str(bin_dir / "pg_ctl")
    started = False
    try:
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                user,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-locale",
                "--no-sync",
            ],
            run_as=run_as,
            cwd=base,
            env=env,
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# dd_etl tests\n"
                f"listen_addresses = '{HOST}'\n"
                "unix_socket_directories = ''\n"
                "fsync = off\n"
                "synchronous_commit = off\n"
                "full_page_writes = off\n"
                "max_connections = 50\n"
            )
        port = free_port()
        start = [pg_ctl, "start", "-D", str(data), "-l", str(log), "-w", "-t", "30"]
        try:
            _run([*start, "-o", f"-p {port}"], run_as=run_as, cwd=base, env=env)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\nserver log:\n{_log_tail(log)}") from None
        started = True
        _wait_ready(pg_isready, port, user, env)
        connect = [psql, "-h", HOST, "-p", str(port), "-U", user, "-d", "postgres"]
        create = ["-v", "ON_ERROR_STOP=1", "-qAtc", f'CREATE DATABASE "{db}"']
        _run([*connect, *create], run_as=_RunAs(), cwd=base, env=env)
        yield PostgresServer(host=HOST, port=port, user=user, password="", db=db)
    finally:
        try:
            if started:
                _run(
                    [pg_ctl, "stop", "-D", str(data), "-m", "fast", "-w", "-t", "30"],
                    run_as=run_as,
                    cwd=base,
                    env=env,
                )
        finally:
            shutil.rmtree(base, ignore_errors=True)
