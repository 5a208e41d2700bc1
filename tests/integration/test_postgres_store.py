"""The PostgreSQL event store against a real server: one schema per session (S4.4).

The shipped event-store suite (`spillvault.testing.event_stores`) runs here as
`TestPostgresEventStore`; the tests after it are PostgreSQL's own.
"""

from __future__ import annotations

import hashlib
import os
import traceback
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from uuid import UUID

import pytest

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.postgres_store import PostgresBackend
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)
from spillvault.testing import event_stores as event_store_conformance

from support.dates import fixed
from support.pgserver import in_ci

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
    from pathlib import Path

    from spillvault.adapters.session import Session

pytestmark = pytest.mark.postgres

T0 = fixed(2025, 1, 2, 3) + timedelta(minutes=4, seconds=5)
EVENTS_TABLE = "spillvault_events"


# helpers -------------------------------------------------------------------


def schema_name(store_id: str) -> str:
    return "spillvault_" + UUID(store_id).hex


def query(dsn: str, statement: Any, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def schema_exists(dsn: str, schema: str) -> bool:
    rows = query(
        dsn,
        "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
        (schema,),
    )
    return bool(rows)


def tables_in(dsn: str, schema: str) -> set[str]:
    rows = query(
        dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (schema,),
    )
    return {row[0] for row in rows}


def event_count(dsn: str, schema: str) -> int:
    statement = sql.SQL("SELECT count(*) FROM {}.{}").format(
        sql.Identifier(schema), sql.Identifier(EVENTS_TABLE)
    )
    return int(query(dsn, statement)[0][0])


def drop_schema(dsn: str, schema: str) -> None:
    query(dsn, sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def dsn_as(dsn: str, user: str, password: str) -> str:
    """The same server and database, as another role with a password."""
    parts = conninfo_to_dict(dsn)
    return (
        f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@/"
        f"{parts['dbname']}?host={quote(str(parts['host']), safe='/')}"
        f"&port={parts['port']}"
    )


def transaction(session: Session, transaction_id: str) -> ArtifactLeaseTransaction:
    digest = hashlib.sha256(transaction_id.encode()).hexdigest()
    source = ArtifactSourceId.for_artifact(
        session.session_id, "tool_result_001.txt", digest
    )
    claim = ArtifactRetentionClaim(str(source), digest)
    return ArtifactLeaseTransaction(transaction_id, claim, T0)


def secret_leaks(error: BaseException, secret: str) -> bool:
    """Say whether `secret` shows in the error, its chain or its traceback."""
    return secret in "".join(traceback.format_exception(error))


# the shipped event-store suite ---------------------------------------------


class TestPostgresEventStore(event_store_conformance.EventStoreTestCase):
    prepared_at = T0

    @pytest.fixture(autouse=True)
    def _server(self, postgres_dsn: str) -> None:
        self.dsn = postgres_dsn

    def session_kwargs(self) -> dict[str, Any]:
        return {"event_store": self.dsn}

    def create_backend(self, session_dir: str, store_id: UUID) -> PostgresBackend:
        return PostgresBackend(self.dsn, store_id)

    def remove_store(self, session_dir: str, store_id: str) -> None:
        drop_schema(self.dsn, schema_name(store_id))


# one schema per session ----------------------------------------------------


def test_creation_makes_a_schema_of_its_own_and_no_local_store(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-create"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        assert session.store_kind == "postgresql"
        store_id = session.store_id

    schema = schema_name(store_id)
    assert schema_exists(postgres_dsn, schema)
    assert EVENTS_TABLE in tables_in(postgres_dsn, schema)
    assert EVENTS_TABLE not in tables_in(postgres_dsn, "public")
    # only the store-id event so far, and nothing written to a local SQLite file
    assert event_count(postgres_dsn, schema) == 1
    assert not os.path.exists(session_dir / "events.sqlite3")


def test_two_sessions_get_two_schemas(postgres_dsn: str, tmp_path: Path) -> None:
    # that they never see each other's leases: TestPostgresEventStore
    with (
        open_session(tmp_path / "pg-one", event_store=postgres_dsn) as one,
        open_session(tmp_path / "pg-two", event_store=postgres_dsn) as two,
    ):
        one.store.prepare_lease(transaction(one, "tx-shared-name"))
        one.store.commit_lease("tx-shared-name", T0)
        two.store.prepare_lease(transaction(two, "tx-shared-name"))
        schema_one, schema_two = schema_name(one.store_id), schema_name(two.store_id)

    assert schema_one != schema_two
    assert event_count(postgres_dsn, schema_one) == 3
    assert event_count(postgres_dsn, schema_two) == 2


# refusals ------------------------------------------------------------------


def test_dropped_table_refuses_to_open(postgres_dsn: str, tmp_path: Path) -> None:
    session_dir = tmp_path / "pg-emptied"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        session.store.prepare_lease(transaction(session, "tx-1"))
        schema = schema_name(session.store_id)
    query(
        postgres_dsn,
        sql.SQL("DROP TABLE {}.{} CASCADE").format(
            sql.Identifier(schema), sql.Identifier(EVENTS_TABLE)
        ),
    )
    with pytest.raises(ArtifactLeaseJournalError, match="empty"):
        open_session(session_dir, event_store=postgres_dsn)


def test_sqlite_session_opened_with_a_dsn_is_refused(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "sqlite-kind"
    with open_session(session_dir) as session:
        schema = schema_name(session.store_id)

    with pytest.raises(ArtifactLeaseJournalError, match="sqlite"):
        open_session(session_dir, event_store=postgres_dsn)
    assert not schema_exists(postgres_dsn, schema)


# connection failures never show the password -------------------------------


def test_wrong_password_is_refused_without_showing_it(
    postgres_dsn: str, tmp_path: Path
) -> None:
    role = "sv_" + uuid.uuid4().hex[:12]
    right, wrong = "Right-" + uuid.uuid4().hex, "Wr0ng-" + uuid.uuid4().hex
    query(
        postgres_dsn,
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(right)
        ),
    )
    query(
        postgres_dsn,
        sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(sql.Identifier(role)),
    )
    # control: the right password works, so the refusal below is about the password
    with open_session(
        tmp_path / "pg-right", event_store=dsn_as(postgres_dsn, role, right)
    ) as session:
        session.store.prepare_lease(transaction(session, "tx-1"))

    session_dir = tmp_path / "pg-wrong"
    with pytest.raises(ArtifactLeaseJournalError) as info:
        open_session(session_dir, event_store=dsn_as(postgres_dsn, role, wrong))
    assert "password authentication failed" in str(info.value)
    assert role in str(info.value)
    assert not secret_leaks(info.value, wrong)
    assert not os.path.exists(session_dir / "session.json")


@pytest.mark.parametrize("where", ["missing-socket-dir", "closed-tcp-port"])
def test_unreachable_server_is_refused_without_showing_the_password(
    tmp_path: Path, where: str
) -> None:
    password = "Hidden-" + uuid.uuid4().hex
    if where == "missing-socket-dir":
        host = quote(str(tmp_path / "no-such-socket-dir"), safe="/")
        dsn = f"postgresql://postgres:{password}@/postgres?host={host}&port=5432"
    else:
        dsn = f"postgresql://postgres:{password}@127.0.0.1:1/postgres"

    session_dir = tmp_path / "pg-unreachable"
    with pytest.raises(ArtifactLeaseJournalError, match="unavailable") as info:
        open_session(session_dir, event_store=dsn)
    assert not secret_leaks(info.value, password)
    assert not os.path.exists(session_dir / "session.json")


# DSN settings --------------------------------------------------------------


def test_dsn_settings_the_store_cannot_honour_are_refused_not_dropped(
    tmp_path: Path,
) -> None:
    dsn = "postgresql://u:secret@db.example/db?sslmode=verify-full&sslrootcert=/ca.pem"
    with pytest.raises(ArtifactLeaseJournalError, match="sslmode, sslrootcert") as e:
        open_session(tmp_path / "s", event_store=dsn)
    assert "secret" not in str(e.value)
    assert not (tmp_path / "s" / "session.json").exists()
