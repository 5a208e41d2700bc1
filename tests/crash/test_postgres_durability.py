"""PostgreSQL durability: every spillvault transaction commits synchronously (S4.4).

A server, database or role tuned with `synchronous_commit=off` acknowledges a
commit before its WAL is written, so a server crash loses it. spillvault asks
for `on` when it connects, for the event store and the owner alike. The crash
tests freeze the WAL writer with SIGSTOP, so that nothing but a backend's own
synchronous commit can write the WAL before the crash: an unsynchronised
commit is lost every time, never by timing.
"""

from __future__ import annotations

import os
import signal
import uuid
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from uuid import UUID

import pytest

from spillvault.adapters.owners.postgres_owner import PostgresOwner
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.postgres_store import (
    PostgresBackend,
    synchronous_options,
)
from spillvault.adapters.storage.s3_client import s3_client
from spillvault.domain.enums import (
    ArtifactLeasePhase,
    ArtifactReconciliationStatus,
    ArtifactReferencePresence,
)
from spillvault.domain.values import ArtifactMemoryReference, ArtifactRetentionClaim

from support.fakes import FakeClock
from support.leases import T0
from support.pg_fixture import server_or_skip
from support.pgserver import in_ci
from support.seaweedfs import S3Server, s3_environment

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
except ImportError:  # the postgres extra is missing: an error in CI, else a skip
    if in_ci():
        raise
    pytest.skip(
        "needs the postgres extra: pip install 'spillvault[postgres]'",
        allow_module_level=True,
    )

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session

    from support.pgserver import PostgresServer

pytestmark = pytest.mark.postgres

Status = ArtifactReconciliationStatus
CRASH_SETTINGS = {
    # The tuning the review found: a commit is acknowledged before it is written.
    "synchronous_commit": "off",
    # Nothing else may write the WAL between an acknowledgement and the crash.
    "autovacuum": "off",
    "bgwriter_lru_maxpages": "0",
    "checkpoint_timeout": "1d",
    "wal_writer_delay": "10000ms",
}
FREEZE_ATTEMPTS = 50


# helpers -------------------------------------------------------------------


def admin(dsn: str, statement: Any, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def dsn_as(dsn: str, user: str, password: str) -> str:
    """The same server and database, as another role."""
    parts = conninfo_to_dict(dsn)
    return (
        f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@/"
        f"{parts['dbname']}?host={quote(str(parts['host']), safe='/')}"
        f"&port={parts['port']}"
    )


def setting(connection: Any, name: str) -> str:
    row = connection.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
    return str(row[name] if isinstance(row, dict) else row[0])


def reference(session: Session) -> ArtifactMemoryReference:
    stored = session.externalizer.externalize("evidence\n" * 4000, "pytest").artifact
    return stored.for_memory()


def claim_of(ref: ArtifactMemoryReference) -> ArtifactRetentionClaim:
    return ArtifactRetentionClaim.from_memory_reference(ref)


def freeze_wal_writer(dsn: str) -> int:
    """SIGSTOP the WAL writer while it idles; from now on only commits write WAL."""
    # Stopped anywhere but in its idle wait it might hold the WAL write lock and
    # stall every synchronous commit: let it go and catch it again.
    ((pid,),) = admin(
        dsn, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'"
    )
    for _ in range(FREEZE_ATTEMPTS):
        os.kill(pid, signal.SIGSTOP)
        ((event,),) = admin(
            dsn, "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
        )
        if event == "WalWriterMain":
            return int(pid)
        os.kill(pid, signal.SIGCONT)
    pytest.fail(f"the WAL writer was never caught idle in {FREEZE_ATTEMPTS} tries")


def crash_after_an_unsynchronised_commit(
    server: PostgresServer, wal_writer: int
) -> str:
    """Commit a control row unsynchronised, crash the server; return the row's mark."""
    # The restarted server must have lost the row: the crash did lose whatever
    # was acknowledged but not yet written.
    mark = uuid.uuid4().hex
    admin(server.dsn, "INSERT INTO durability_control (mark) VALUES (%s)", (mark,))
    server.crash(kill=[wal_writer])
    return mark


def control_rows(dsn: str, mark: str) -> int:
    ((count,),) = admin(
        dsn, "SELECT count(*) FROM durability_control WHERE mark = %s", (mark,)
    )
    return int(count)


@pytest.fixture
def crashable() -> Iterator[PostgresServer]:
    """A server of this test's own, tuned with synchronous_commit=off."""
    server = server_or_skip(CRASH_SETTINGS)
    try:
        # Committed synchronously, so that the control table itself survives.
        with psycopg.connect(server.dsn, autocommit=True) as connection:
            connection.execute("SET synchronous_commit = on")
            connection.execute("CREATE TABLE durability_control (mark text)")
        yield server
    finally:
        server.stop()


@pytest.fixture
def role_dsn(postgres_dsn: str) -> str:
    """A DSN of a role whose own setting is synchronous_commit=off."""
    role, password = "sv_async_" + uuid.uuid4().hex[:12], uuid.uuid4().hex
    name, secret = sql.Identifier(role), sql.Literal(password)
    admin(
        postgres_dsn, sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(name, secret)
    )
    admin(postgres_dsn, sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(name))
    admin(
        postgres_dsn,
        sql.SQL("ALTER ROLE {} SET synchronous_commit = off").format(name),
    )
    return dsn_as(postgres_dsn, role, password)


# every connection asks for synchronous commits ------------------------------


def test_the_event_store_connections_commit_synchronously(
    role_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # libpq's own PGOPTIONS still applies: spillvault adds to it, never drops it.
    monkeypatch.setenv("PGOPTIONS", "-c application_name=from-pgoptions")
    with psycopg.connect(role_dsn) as plain:
        assert setting(plain, "synchronous_commit") == "off"  # what others get
    with open_session(tmp_path / "s", event_store=role_dsn) as session:
        datastore = session.store.recorder.datastore  # type: ignore[attr-defined]
        with ExitStack() as held:
            # More than the pool keeps open, so an overflow connection is seen too.
            connections = [
                held.enter_context(datastore.get_connection()) for _ in "abc"
            ]
            assert len({id(connection) for connection in connections}) == 3
            assert [setting(c, "synchronous_commit") for c in connections] == ["on"] * 3
            assert [setting(c, "application_name") for c in connections] == [
                "from-pgoptions"
            ] * 3
        backend = PostgresBackend(role_dsn, UUID(session.store_id))
        assert backend._admin("SHOW synchronous_commit") == [("on",)]


def test_the_owner_connections_commit_synchronously(role_dsn: str) -> None:
    schema = "owner_" + uuid.uuid4().hex
    # A DSN asking for off gets on; its other options are kept.
    asking = (
        role_dsn
        + "&options="
        + quote("-c synchronous_commit=off -c application_name=from-dsn", safe="")
    )
    for dsn, name in ((role_dsn, ""), (asking, "from-dsn")):
        owner = PostgresOwner(dsn, schema=schema)
        connection = owner._connect()
        try:
            assert setting(connection, "synchronous_commit") == "on"
            assert setting(connection, "application_name") == name
        finally:
            connection.close()


# acknowledged events survive a server crash ---------------------------------


@pytest.fixture(params=["directory", "vault"])
def place(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, dict[str, str]]:
    """Where the session lives: a directory, or a vault (SeaweedFS, issue 18)."""
    if request.param == "directory":
        return str(tmp_path / "s"), {}
    server: S3Server = request.getfixturevalue("s3_server")
    for name, value in s3_environment(server).items():
        monkeypatch.setenv(name, value)
    bucket = "durability-" + uuid.uuid4().hex[:12]
    s3_client().create_bucket(Bucket=bucket)
    return "s", {"artifacts": f"s3://{bucket}/pg"}


def test_acknowledged_lease_events_survive_a_crash_of_a_server_tuned_not_to_wait(
    crashable: PostgresServer, place: tuple[str, dict[str, str]]
) -> None:
    server, (session_dir, where) = crashable, place
    owner = PostgresOwner(server.dsn, schema="owner_crash")
    marks: list[str] = []

    def crash_mid_publication() -> None:
        marks.append(crash_after_an_unsynchronised_commit(server, wal_writer))
        msg = "the server went away mid-publication"
        raise ConnectionError(msg)

    with open_session(
        session_dir, event_store=server.dsn, clock=FakeClock(T0), **where
    ) as s:
        ref = reference(s)
        wal_writer = freeze_wal_writer(server.dsn)
        s.journal.publish_reference(
            claim_of(ref), owner.publisher(ref, "tx-done"), transaction_id="tx-done"
        )
        # PREPARED is acknowledged, then the server dies under the publisher:
        # the store's event is the last thing written before the crash.
        with pytest.raises(ConnectionError):
            s.journal.publish_reference(
                claim_of(ref), crash_mid_publication, transaction_id="tx-flight"
            )
        # Back before this session closes: against a dead server, closing
        # would wait out eventsourcing's retries of the view's save.
        server.start()

    assert control_rows(server.dsn, marks[0]) == 0  # unsynchronised: lost
    with open_session(session_dir, event_store=server.dsn, **where) as session:
        done, flight = (session.store.get_lease(tx) for tx in ("tx-done", "tx-flight"))
        assert done.phase_history == ["prepared", "committed"]
        assert flight.phase_history == ["prepared"]
        assert session.journal.pending_transaction_ids == ("tx-flight",)
        assert session.journal.verify().records == 3
        report = session.journal.reconcile_reference("tx-flight", owner)
        assert report.status is Status.ABORTED  # the owner never got it


def test_an_acknowledged_owner_publish_survives_a_crash_of_a_server_tuned_not_to_wait(
    crashable: PostgresServer, tmp_path: Path
) -> None:
    server, session_dir = crashable, tmp_path / "s"
    owner = PostgresOwner(server.dsn, schema="owner_crash")
    marks: list[str] = []

    with open_session(session_dir, event_store=server.dsn, clock=FakeClock(T0)) as s:
        ref = reference(s)
        wal_writer = freeze_wal_writer(server.dsn)

        def publish_then_crash() -> None:
            # The owner's commit is the last thing written before the crash.
            owner.publish("tx", ref)
            marks.append(crash_after_an_unsynchronised_commit(server, wal_writer))
            msg = "the server went away before the reply"
            raise ConnectionError(msg)

        with pytest.raises(ConnectionError):
            s.journal.publish_reference(
                claim_of(ref), publish_then_crash, transaction_id="tx"
            )
        server.start()

    assert control_rows(server.dsn, marks[0]) == 0  # unsynchronised: lost
    with open_session(session_dir, event_store=server.dsn) as session:
        transaction = session.store.get_lease("tx").transaction
        with owner.inspect_fenced(transaction) as fence:
            assert fence.observation.presence is ArtifactReferencePresence.PUBLISHED
        (report,) = session.journal.reconcile_pending(owner)
        assert report.status is Status.COMMITTED
        assert session.store.get_lease("tx").phase is ArtifactLeasePhase.COMMITTED


SYNC = "-c synchronous_commit="


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, f"{SYNC}on"),
        ("-c application_name=x", f"-c application_name=x {SYNC}on"),
        (f"{SYNC}off", f"{SYNC}off {SYNC}on"),
        (f"{SYNC}remote_apply", f"{SYNC}remote_apply"),
        ("--synchronous_commit=local", "--synchronous_commit=local"),
        (f"{SYNC}on {SYNC}off", f"{SYNC}on {SYNC}off {SYNC}on"),
    ],
)
def test_a_durable_level_asked_for_is_kept_and_off_is_overridden(
    monkeypatch: pytest.MonkeyPatch, given: str | None, expected: str
) -> None:
    monkeypatch.delenv("PGOPTIONS", raising=False)
    assert synchronous_options(given) == expected
