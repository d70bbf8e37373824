"""A throwaway S3 server for tests: S3Proxy on a free port of 127.0.0.1.

S3Proxy speaks S3's REST API, signatures and conditional writes, storing objects
in a temporary directory (jclouds' ``transient-nio2``). Its one jar (~98 MB, with
its dependencies) comes from Maven Central through ``dd_etl.maven_jars``, into the
cache Spark's jars are in; it runs on the ``java`` on ``PATH`` (17 or later).
``started()`` starts it and stops it on exit. Its process group is killed at the
end even if a test fails, at interpreter exit if the test run is cut short, and,
on Linux, by the kernel when the test process dies (SIGKILL, SIGTERM).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dd_etl import maven_jars
from dd_etl.maven_jars import Artifact

HOST = "127.0.0.1"
S3PROXY = Artifact("org.gaul", "s3proxy", "4.0.0", "jar-with-dependencies")
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
PR_SET_PDEATHSIG = 1


@dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    directory: Path | None = field(default=None, repr=False)

    def bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh, unique name unless ``name``) and return its name."""
        from pyarrow.fs import S3FileSystem

        name = name or f"dd-etl-{secrets.token_hex(6)}"
        s3 = S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=self.endpoint,
            scheme="http",
            region=self.region,
            allow_bucket_creation=True,
        )
        s3.create_dir(name)
        return name

    def storage_options(self) -> dict[str, str]:
        """The server by the names delta-rs and object_store read."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ALLOW_HTTP": "true",
        }

    def stop(self) -> None:
        """Kill the server's process group (SIGTERM, then SIGKILL) and remove its data;
        again, nothing."""
        process, self.process = self.process, None
        if process is not None:
            kill_group(process)
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def started() -> Iterator[S3Server]:
    """A running S3 server, stopped on exit."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("S3Proxy needs Java 17 or later: no `java` on PATH")
    jar = maven_jars.fetched([S3PROXY])[0]
    directory = Path(tempfile.mkdtemp(prefix="dd_etl-s3-"))
    port = _free_port()
    server = S3Server(
        endpoint=f"http://{HOST}:{port}",
        access_key="dd-etl-test",
        secret_key=secrets.token_hex(16),
        directory=directory,
    )
    atexit.register(server.stop)
    try:
        properties = directory / "s3proxy.properties"
        (directory / "data").mkdir()
        properties.write_text(
            "s3proxy.authorization=aws-v2-or-v4\n"
            f"s3proxy.identity={server.access_key}\n"
            f"s3proxy.credential={server.secret_key}\n"
            f"s3proxy.endpoint={server.endpoint}\n"
            "jclouds.provider=transient-nio2\n"
            "jclouds.identity=x\n"
            "jclouds.credential=x\n"
            f"jclouds.filesystem.basedir={directory / 'data'}\n"
        )
        log = directory / "s3proxy.log"
        with log.open("wb") as out:
            server.process = subprocess.Popen(
                [java, "-jar", str(jar), "--properties", str(properties)],
                cwd=directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=dies_with_parent(),
            )
        _wait_ready(server.endpoint, server.process, log)
        yield server
    finally:
        server.stop()
        atexit.unregister(server.stop)


def dies_with_parent() -> Callable[[], None] | None:
    """On Linux, the child is killed when the thread that started it ends: even a
    test process killed outright, which runs no ``atexit``, leaves no server."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork, not in the child
    return lambda: libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_ready(endpoint: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Ready once it refuses an anonymous listing (403)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            urllib.request.urlopen(endpoint + "/", timeout=2).close()
        except urllib.error.HTTPError as e:
            if e.code == 403:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"S3Proxy did not start at {endpoint}; its log:\n{tail}")
        time.sleep(0.1)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue
    process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])
