"""Many hosts, one vault (issue 18): three processes share SeaweedFS and PostgreSQL.

Host A spills and publishes leases, host B reads and greps by handle and
removes references, host C runs GC apply in a loop, each a process of its own
with its own `SPILLVAULT_HOME` and, where the machine lets us make one, a
network namespace of its own (`support.netns`): its own loopback, linked to
the servers by sockets, so no host shares a network with another. They run
for a bounded number of rounds (counts, not a time window). Afterwards: no
leased or prepared artifact was deleted, every acknowledged lease not removed
is present and its object intact, the journal verifies, and every object has
an event.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from psycopg.conninfo import conninfo_to_dict

from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.s3_client import s3_client
from spillvault.domain.enums import ArtifactLeasePhase, ArtifactState

from support.netns import (
    Link,
    UnixToTcp,
    can_isolate,
    isolated_argv,
    links_environment,
    network_namespace,
)
from support.seaweedfs import S3Server, s3_environment

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pytest

    from spillvault.adapters.session import Session

TESTS = Path(__file__).parent.parent
HOST = (sys.executable, "-m", "support.vault_hosts")
SPILLS = 12
_runs = itertools.count(1)


def _lines(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_three_hosts_share_one_vault_and_lose_nothing_referenced(
    s3_server: S3Server,
    postgres_dsn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in s3_environment(s3_server).items():
        monkeypatch.setenv(name, value)
    bucket = f"fleet-{next(_runs)}"
    s3_client().create_bucket(Bucket=bucket)
    vault = {
        **s3_environment(s3_server),
        "SPILLVAULT_ARTIFACTS": f"s3://{bucket}/ci",
        "SPILLVAULT_EVENT_STORE": postgres_dsn,
    }
    work = tmp_path / "work"
    work.mkdir()
    roles = ("spiller", "reader", "collector")
    with _network(s3_server, postgres_dsn) as (wrap, links, dsn):
        hosts = {}
        for role in roles:
            home = tmp_path / role
            home.mkdir()
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(home),
                "SPILLVAULT_HOME": str(home / "sessions"),
                "PYTHONPATH": str(TESTS),
                **vault,
                "SPILLVAULT_EVENT_STORE": dsn,
                **links,
            }
            hosts[role] = subprocess.Popen(
                wrap([*HOST, role, "fleet-run", str(work), str(SPILLS)]),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        for role, host in hosts.items():
            output, _ = host.communicate(timeout=600)
            assert host.returncode == 0, f"{role}:\n{output}"
    namespaces = {(work / f"{role}.netns").read_text() for role in roles}
    if links:
        assert len(namespaces) == len(roles), "two hosts shared a network"
        assert network_namespace() not in namespaces

    acked = {e["tx"]: e["handle"] for e in _lines(work / "acked.jsonl")}
    removed = {e["tx"] for e in _lines(work / "removed.jsonl")}
    deleted = {e["name"] for e in _lines(work / "deleted.jsonl")}
    assert acked, "no lease was acknowledged"
    assert removed, "no reference was removed"
    assert int((work / "collector.runs").read_text()) >= 2
    with open_session(
        "fleet-run", artifacts=vault["SPILLVAULT_ARTIFACTS"], event_store=postgres_dsn
    ) as session:
        _check_the_vault(session, acked, removed, deleted)


@contextlib.contextmanager
def _network(
    server: S3Server, dsn: str
) -> Iterator[tuple[Callable[[list[str]], list[str]], dict[str, str], str]]:
    """How to start a host, the links it needs, and its DSN for PostgreSQL.

    In a namespace of its own, a host's 127.0.0.1 is its own: S3 is reached
    through a Unix socket bridged to SeaweedFS's port here, PostgreSQL
    through its own Unix socket, each behind a TCP port on the host's
    loopback, so the host talks TCP to both as a remote host would.
    """
    if not can_isolate():
        warnings.warn(
            "no network namespaces here (unshare --net refused): the hosts "
            "share this machine's network",
            stacklevel=2,
        )
        yield list, {}, dsn
        return
    s3_port = urlsplit(server.endpoint).port
    assert s3_port is not None
    postgres = conninfo_to_dict(dsn)
    pg_port = int(str(postgres["port"]))
    socket_dir = tempfile.mkdtemp(prefix="svnet-")  # short: Unix paths <= 107
    bridge = UnixToTcp(f"{socket_dir}/s3", s3_port)
    links = [
        Link(s3_port, f"{socket_dir}/s3"),
        Link(pg_port, f"{postgres['host']}/.s.PGSQL.{pg_port}"),
    ]
    tcp_dsn = (
        f"postgresql://{postgres['user']}@127.0.0.1:{pg_port}/{postgres['dbname']}"
    )
    try:
        yield isolated_argv, links_environment(links), tcp_dsn
    finally:
        bridge.close()
        Path(f"{socket_dir}/s3").unlink(missing_ok=True)
        Path(socket_dir).rmdir()


def _check_the_vault(
    session: Session, acked: dict[str, str], removed: set[str], deleted: set[str]
) -> None:
    store = session.externalizer.store
    objects = set(store.object_names())  # type: ignore[attr-defined]
    for tx, handle in acked.items():
        name = store.resolve(handle)
        lease = session.store.get_lease(tx)
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        if tx in removed:
            assert lease.phase is ArtifactLeasePhase.RELEASED
            continue
        assert lease.phase is ArtifactLeasePhase.COMMITTED, tx
        assert name not in deleted, f"{name} was deleted under lease {tx}"
        assert artifact.artifact_state is ArtifactState.SEALED
        assert name in objects
        content = artifact.stored_content
        assert content is not None
        store.confirm(name, content)
    for live in session_projection(session).live_leases().values():
        name = live.claim.parsed_source_id.filename
        assert name not in deleted, f"{name} was deleted under live lease"
        assert name in objects
    for name in objects:
        recorded = session.store.get_artifact(name)
        assert recorded is not None, f"object {name} has no event"
    for tx in removed:  # unprotected when the last GC run began: collected
        assert store.resolve(acked[tx]) in deleted
    for name in deleted:
        gone = session.store.get_artifact(name)
        assert gone is not None
        assert gone.artifact_state is ArtifactState.DELETED
        assert name not in objects
    assert session.journal.verify().records > 0
