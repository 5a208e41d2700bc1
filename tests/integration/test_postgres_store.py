"""The PostgreSQL event store against a real server: one schema per session (S4.4)."""

from __future__ import annotations

import hashlib
import json
import os
import traceback
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from uuid import UUID

import pytest

from spillvault.adapters.session import derive_store_id, open_session
from spillvault.domain.errors import ArtifactLeaseJournalError, ArtifactStoreConflict
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)

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


def read_marker(session_dir: Path) -> dict[str, Any]:
    with open(session_dir / "session.json", encoding="ascii") as marker:
        data: dict[str, Any] = json.load(marker)
    return data


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


# creation ------------------------------------------------------------------


def test_creation_writes_marker_and_a_schema_of_its_own(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-create"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        assert session.store_kind == "postgresql"
        derived = derive_store_id(session.fs, session.dir_fd, session.path)
        assert session.store_id == str(derived)
        store_id = session.store_id

    marker = read_marker(session_dir)
    assert marker["event_store"] == "postgresql"
    assert marker["store_id"] == store_id
    assert marker["session_id"] == "pg-create"
    schema = schema_name(store_id)
    assert schema_exists(postgres_dsn, schema)
    assert EVENTS_TABLE in tables_in(postgres_dsn, schema)
    assert EVENTS_TABLE not in tables_in(postgres_dsn, "public")
    # only the store-id event so far, and nothing written to a local SQLite file
    assert event_count(postgres_dsn, schema) == 1
    assert not os.path.exists(session_dir / "events.sqlite3")


def test_lease_round_trip_survives_close_and_reopen(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-leases"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        store = session.store
        store.prepare_lease(transaction(session, "memory-ref-1"))
        store.commit_lease("memory-ref-1", T0 + timedelta(seconds=1))
        store.release_lease("memory-ref-1", T0 + timedelta(seconds=2))
        store.prepare_lease(transaction(session, "memory-ref-2"))
        store.abort_lease("memory-ref-2", T0 + timedelta(seconds=3))
        store.prepare_lease(transaction(session, "memory-ref-3"))
        store_id = session.store_id

    with open_session(session_dir, event_store=postgres_dsn) as session:
        assert session.store_id == store_id
        first = session.store.get_lease("memory-ref-1")
        assert first.phase_history == ["prepared", "committed", "released"]
        assert first.version == 3
        assert first.phase_times == {
            phase: (T0 + timedelta(seconds=offset)).isoformat()
            for offset, phase in enumerate(("prepared", "committed", "released"))
        }
        assert first.claim == transaction(session, "memory-ref-1").claim
        second = session.store.get_lease("memory-ref-2")
        assert second.phase_history == ["prepared", "aborted"]
        assert second.version == 2
        pending = session.store.get_lease("memory-ref-3")
        assert pending.phase_history == ["prepared"]
        assert pending.protects(T0 + timedelta(days=3650))
        # identity + 3 + 2 + 1 lease events, in position order
        topics = [
            note.topic
            for note in session.store.notifications()
            if not note.topic.startswith("spillvault:SessionView")
        ]
        assert len(topics) == 7
        views = session.store.max_position() - 7  # the session view's saves (S8.1)
        # the reopened store keeps enforcing the lease machine
        with pytest.raises(ArtifactLeaseJournalError, match="illegal transition"):
            session.store.commit_lease("memory-ref-2", T0)
    assert event_count(postgres_dsn, schema_name(store_id)) == 7 + views


def test_reused_transaction_id_is_refused_across_objects(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-reuse"
    with (
        open_session(session_dir, event_store=postgres_dsn) as one,
        open_session(session_dir, event_store=postgres_dsn) as other,
    ):
        one.store.prepare_lease(transaction(one, "tx-once"))
        with pytest.raises(ArtifactLeaseJournalError, match="already used"):
            other.store.prepare_lease(transaction(other, "tx-once"))
        assert other.store.get_lease("tx-once").version == 1


# isolation -----------------------------------------------------------------


def test_two_sessions_get_two_schemas_and_never_see_each_other(
    postgres_dsn: str, tmp_path: Path
) -> None:
    with (
        open_session(tmp_path / "pg-one", event_store=postgres_dsn) as one,
        open_session(tmp_path / "pg-two", event_store=postgres_dsn) as two,
    ):
        assert one.store_id != two.store_id
        one.store.prepare_lease(transaction(one, "tx-shared-name"))
        one.store.commit_lease("tx-shared-name", T0)
        two.store.prepare_lease(transaction(two, "tx-only-two"))

        assert two.store.find_lease("tx-shared-name") is None
        assert one.store.find_lease("tx-only-two") is None
        assert one.store.max_position() == 3
        assert two.store.max_position() == 2
        # the same transaction id is free in the other session
        two.store.prepare_lease(transaction(two, "tx-shared-name"))
        assert two.store.get_lease("tx-shared-name").phase_history == ["prepared"]
        assert one.store.get_lease("tx-shared-name").phase_history == [
            "prepared",
            "committed",
        ]
        schema_one, schema_two = schema_name(one.store_id), schema_name(two.store_id)

    assert schema_one != schema_two
    assert event_count(postgres_dsn, schema_one) == 3
    assert event_count(postgres_dsn, schema_two) == 3


# refusals ------------------------------------------------------------------


def test_dropped_schema_refuses_to_open_and_is_not_recreated(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-dropped"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        session.store.prepare_lease(transaction(session, "tx-1"))
        schema = schema_name(session.store_id)
    drop_schema(postgres_dsn, schema)

    with pytest.raises(ArtifactLeaseJournalError, match="event store missing") as info:
        open_session(session_dir, event_store=postgres_dsn)
    assert schema in str(info.value)
    assert not schema_exists(postgres_dsn, schema)
    # refusing twice: the failed open left nothing behind to "find" next time
    with pytest.raises(ArtifactLeaseJournalError, match="event store missing"):
        open_session(session_dir, event_store=postgres_dsn)


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


@pytest.mark.parametrize(
    ("event_store", "kind"), [(None, "sqlite"), ("memory", "memory")]
)
def test_postgres_session_opened_with_another_store_kind_is_refused(
    postgres_dsn: str, tmp_path: Path, event_store: str | None, kind: str
) -> None:
    session_dir = tmp_path / "pg-kind"
    open_session(session_dir, event_store=postgres_dsn).close()

    with pytest.raises(ArtifactLeaseJournalError, match="postgresql") as info:
        open_session(session_dir, event_store=event_store)
    assert kind in str(info.value)
    assert not os.path.exists(session_dir / "events.sqlite3")
    assert read_marker(session_dir)["event_store"] == "postgresql"
    open_session(session_dir, event_store=postgres_dsn).close()


def test_sqlite_session_opened_with_a_dsn_is_refused(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "sqlite-kind"
    with open_session(session_dir) as session:
        schema = schema_name(session.store_id)

    with pytest.raises(ArtifactLeaseJournalError, match="sqlite"):
        open_session(session_dir, event_store=postgres_dsn)
    assert not schema_exists(postgres_dsn, schema)


def test_interrupted_creation_is_finished_in_the_same_schema(
    postgres_dsn: str, tmp_path: Path
) -> None:
    # A crash after the store-id event but before the marker: only the id is stored.
    session_dir = tmp_path / "pg-interrupted"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        store_id = session.store_id
    os.unlink(session_dir / "session.json")

    with open_session(session_dir, event_store=postgres_dsn) as session:
        assert session.store_id == store_id
        session.store.prepare_lease(transaction(session, "tx-after"))
    assert read_marker(session_dir)["store_id"] == store_id
    assert event_count(postgres_dsn, schema_name(store_id)) == 2


def test_missing_marker_with_stored_events_is_refused(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-no-marker"
    with open_session(session_dir, event_store=postgres_dsn) as session:
        session.store.prepare_lease(transaction(session, "tx-1"))
        schema = schema_name(session.store_id)
    os.unlink(session_dir / "session.json")

    with pytest.raises(
        ArtifactLeaseJournalError, match=r"marker session\.json missing"
    ):
        open_session(session_dir, event_store=postgres_dsn)
    assert not os.path.exists(session_dir / "session.json")
    assert event_count(postgres_dsn, schema) == 2


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


# optimistic concurrency ----------------------------------------------------


def test_two_objects_on_one_session_lose_races_visibly(
    postgres_dsn: str, tmp_path: Path
) -> None:
    session_dir = tmp_path / "pg-race"
    with (
        open_session(session_dir, event_store=postgres_dsn) as one,
        open_session(session_dir, event_store=postgres_dsn) as other,
    ):
        assert one.store is not other.store
        assert one.lock is other.lock
        one.store.prepare_lease(transaction(one, "tx-race"))
        mine = one.store.get_lease("tx-race")
        theirs = other.store.get_lease("tx-race")

        mine.commit(T0)
        one.store.save_aggregates(mine)
        theirs.abort(T0)
        with pytest.raises(ArtifactStoreConflict):
            other.store.save_aggregates(theirs)

        # the winner's event is the only one stored, seen from both objects
        for session in (one, other):
            lease = session.store.get_lease("tx-race")
            assert lease.phase_history == ["prepared", "committed"]
            assert lease.version == 2
        assert other.store.max_position() == 3

        # the loser's store still works: the retrying command path commits
        other.store.prepare_lease(transaction(other, "tx-fresh"))
        committed = other.store.commit_lease("tx-fresh", T0)
        assert committed.phase_history == ["prepared", "committed"]
        assert one.store.get_lease("tx-fresh").version == 2


def test_retrying_command_reloads_and_decides_again_after_a_lost_race(
    postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_dir = tmp_path / "pg-retry"
    with (
        open_session(session_dir, event_store=postgres_dsn) as one,
        open_session(session_dir, event_store=postgres_dsn) as other,
    ):
        one.store.prepare_lease(transaction(one, "tx-retry"))
        stale = other.store.get_lease("tx-retry")
        one.store.abort_lease("tx-retry", T0)

        loads: list[str] = []
        fresh_load = other.store.get_lease

        def load(transaction_id: str) -> Any:
            loads.append(transaction_id)
            return stale if len(loads) == 1 else fresh_load(transaction_id)

        monkeypatch.setattr(other.store, "get_lease", load)
        # 1st attempt: commit the stale copy -> conflict; 2nd: reload -> aborted
        with pytest.raises(
            ArtifactLeaseJournalError, match="illegal transition"
        ) as info:
            other.store.commit_lease("tx-retry", T0)
        assert not isinstance(info.value, ArtifactStoreConflict)
        assert loads == ["tx-retry", "tx-retry"]
        assert one.store.get_lease("tx-retry").phase_history == ["prepared", "aborted"]


def test_dsn_settings_the_store_cannot_honour_are_refused_not_dropped(
    tmp_path: Path,
) -> None:
    dsn = "postgresql://u:secret@db.example/db?sslmode=verify-full&sslrootcert=/ca.pem"
    with pytest.raises(ArtifactLeaseJournalError, match="sslmode, sslrootcert") as e:
        open_session(tmp_path / "s", event_store=dsn)
    assert "secret" not in str(e.value)
    assert not (tmp_path / "s" / "session.json").exists()
