"""The memory owners (S5.1, S5.6): the shipped conformance case run on each, plus
what is particular to each: the in-memory knobs, SQLite across processes and
PostgreSQL across connections."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.owners.owner_common import ArtifactOwnerError
from spillvault.adapters.owners.postgres_owner import ATTEMPTS, PostgresOwner
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.domain.enums import ArtifactReferencePresence
from spillvault.domain.errors import (
    ArtifactOwnerGenerationChanged,
    ArtifactPublicationRejected,
)
from spillvault.testing import owners as owner_conformance

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

PUBLISHED = ArtifactReferencePresence.PUBLISHED
ABSENT = ArtifactReferencePresence.ABSENT
UNKNOWN = ArtifactReferencePresence.UNKNOWN


class TestInMemoryOwner(owner_conformance.ArtifactReferenceOwnerTestCase):
    def create_owner(self) -> InMemoryOwner:
        return InMemoryOwner()

    def reopen_owner(self) -> owner_conformance.ConformingOwner:
        return self.owner  # nothing outlives the object

    def test_lost_receipt_writes_then_raises_timeout(self) -> None:
        owner = InMemoryOwner(lose_receipt_for={"tx-lost"})
        reference = self.make_reference()
        with pytest.raises(TimeoutError):
            owner.publish("tx-lost", reference)
        observation = self.observe("tx-lost", owner)
        assert observation.presence is PUBLISHED
        assert observation.source_id == reference.source.source_id

    def test_rejection_tombstones_the_id_before_raising(self) -> None:
        owner = InMemoryOwner(reject_publish_for={"tx-rejected"})
        with pytest.raises(ArtifactPublicationRejected):
            owner.publish("tx-rejected", self.make_reference())
        sealed = self.observe("tx-rejected", owner)
        assert (sealed.presence, sealed.absence_sealed) == (ABSENT, True)
        owner.reject_publish_for.clear()
        with pytest.raises(ArtifactPublicationRejected):
            owner.publish("tx-rejected", self.make_reference())
        assert self.observe("tx-rejected", owner) == sealed

    def test_rejection_leaves_an_already_published_reference(self) -> None:
        owner = InMemoryOwner()
        reference = self.make_reference()
        owner.publish("tx-kept", reference)
        published = self.observe("tx-kept", owner)
        owner.reject_publish_for.add("tx-kept")
        owner.publish("tx-kept", reference)  # the ordinary replay rule answers
        assert self.observe("tx-kept", owner) == published

    def test_unknown_answers_unknown_with_the_real_generation(self) -> None:
        owner = InMemoryOwner(unknown_for={"tx-unknown"})
        owner.publish("tx-unknown", self.make_reference())
        observation = self.observe("tx-unknown", owner)
        assert (observation.presence, observation.generation) == (UNKNOWN, 1)
        assert observation.source_id is None
        owner.unknown_for.clear()
        assert self.observe("tx-unknown", owner).presence is PUBLISHED

    def test_moved_generation_makes_the_seal_stale(self) -> None:
        owner = InMemoryOwner(move_generation_for={"tx-stale"})
        with owner.inspect_fenced(self.make_transaction("tx-stale")) as fence:
            assert fence.observation.generation == 0
            with pytest.raises(ArtifactOwnerGenerationChanged, match="from 0 to 1"):
                fence.seal_absent()
        owner.move_generation_for.clear()
        observation = self.observe("tx-stale", owner)
        assert (observation.generation, observation.absence_sealed) == (1, False)
        with owner.inspect_fenced(self.make_transaction("tx-stale")) as fence:
            assert fence.seal_absent().generation == 2

    def test_a_fence_held_too_long_is_an_owner_error(self) -> None:
        owner = InMemoryOwner(lock_timeout=0.05)
        with owner.inspect_fenced(self.make_transaction("tx-busy")):
            done, errors = self.run_in_thread(lambda: owner.remove("tx-busy"))
            assert done.wait(self.timeout_seconds)
        assert len(errors) == 1
        assert isinstance(errors[0], ArtifactOwnerError)
        assert "still held" in str(errors[0])

    def test_fences_on_different_ids_do_not_wait_for_each_other(self) -> None:
        with self.owner.inspect_fenced(self.make_transaction("tx-one")):
            done, errors = self.run_in_thread(
                lambda: self.owner.publish("tx-two", self.make_reference())
            )
            assert done.wait(self.timeout_seconds)
        assert errors == []

    def test_bad_transaction_ids_are_refused(self) -> None:
        for bad in ("", "tx\x00nul"):
            with pytest.raises(ValueError, match="transaction id"):
                self.owner.publish(bad, self.make_reference())


class TestSQLiteOwner(owner_conformance.SharedStorageOwnerTestCase):
    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "owner.sqlite3"

    def create_owner(self) -> SQLiteOwner:
        return SQLiteOwner(self.path)

    def process_owner_factory(self) -> Callable[[], SQLiteOwner]:
        return partial(SQLiteOwner, str(self.path))

    def test_database_file_is_private(self) -> None:
        old_umask = os.umask(0)
        try:
            SQLiteOwner(self.path.with_name("loose-umask.sqlite3"))
        finally:
            os.umask(old_umask)
        for path in (self.path, self.path.with_name("loose-umask.sqlite3")):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

    def test_a_fence_held_too_long_is_an_owner_error_with_its_cause(self) -> None:
        impatient = SQLiteOwner(self.path, lock_timeout=0.1)
        with (
            self.owner.inspect_fenced(self.make_transaction("tx-busy")),
            pytest.raises(ArtifactOwnerError, match="locked") as caught,
        ):
            impatient.publish("tx-busy", self.make_reference())
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        assert self.observe("tx-busy").generation == 0

    def test_a_vanished_database_is_an_error_not_a_fresh_start(self) -> None:
        self.seal("tx-sealed")
        for suffix in ("", "-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        with pytest.raises(ArtifactOwnerError) as caught:
            self.owner.publish("tx-sealed", self.make_reference())
        assert isinstance(caught.value.__cause__, sqlite3.Error)
        assert not self.path.exists()

    def test_a_malformed_row_is_an_owner_error(self) -> None:
        with sqlite3.connect(self.path) as connection:
            connection.execute(
                "INSERT INTO artifact_references VALUES (?, 1, 'published', ?, ?, ?)",
                ("tx-bad", "s", "d", "{not json"),
            )
        connection.close()
        with pytest.raises(ArtifactOwnerError, match="malformed"):
            self.observe("tx-bad")


@pytest.mark.postgres
class TestPostgresOwner(owner_conformance.SharedStorageOwnerTestCase):
    @pytest.fixture(autouse=True)
    def _schema(self, postgres_dsn: str) -> Iterator[None]:
        self.dsn = postgres_dsn
        self.schema = f"owner_test_{uuid.uuid4().hex}"
        yield
        self.admin(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def create_owner(self) -> PostgresOwner:
        return PostgresOwner(self.dsn, schema=self.schema)

    def process_owner_factory(self) -> Callable[[], PostgresOwner]:
        return partial(PostgresOwner, self.dsn, schema=self.schema)

    def admin(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg  # noqa: PLC0415 - the postgres extra

        with psycopg.connect(self.dsn, autocommit=True) as connection:
            cursor = connection.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def test_tables_live_in_a_schema_of_their_own(self) -> None:
        tables = self.admin(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (self.schema,),
        )
        assert tables == [("artifact_references",)]

    def test_concurrent_creation_of_one_schema_is_safe(self) -> None:
        schema = f"owner_race_{uuid.uuid4().hex}"
        barrier = threading.Barrier(4)

        def create() -> None:
            barrier.wait()
            PostgresOwner(self.dsn, schema=schema)

        runs = [self.run_in_thread(create) for _ in range(4)]
        try:
            for done, errors in runs:
                assert done.wait(self.timeout_seconds)
                assert errors == []
        finally:
            self.admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    def test_two_owners_contend_on_one_fence(self) -> None:
        owners = [self.owner, PostgresOwner(self.dsn, schema=self.schema)]
        transaction = self.make_transaction("tx-contended")
        barrier = threading.Barrier(len(owners))
        results: list[tuple[Any, Any]] = []

        def reconcile(owner: PostgresOwner) -> None:
            barrier.wait()
            with owner.inspect_fenced(transaction) as fence:
                results.append((fence.observation, fence.seal_absent()))

        runs = [self.run_in_thread(lambda o=o: reconcile(o)) for o in owners]
        for done, errors in runs:
            assert done.wait(self.timeout_seconds)
            assert errors == []
        observed = sorted((seen.generation, seen.absence_sealed) for seen, _ in results)
        assert observed == [(0, False), (1, True)]  # the second waited for the first
        assert results[0][1] == results[1][1]
        assert results[0][1].generation == 1

    def test_a_fence_held_too_long_is_an_owner_error_with_its_cause(self) -> None:
        import psycopg  # noqa: PLC0415 - the postgres extra

        impatient = PostgresOwner(self.dsn, schema=self.schema, lock_timeout=0.2)
        with (
            self.owner.inspect_fenced(self.make_transaction("tx-busy")),
            pytest.raises(ArtifactOwnerError, match="lock") as caught,
        ):
            impatient.publish("tx-busy", self.make_reference())
        assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
        assert self.observe("tx-busy").generation == 0

    def test_an_unreachable_server_is_an_owner_error(self) -> None:
        import psycopg  # noqa: PLC0415 - the postgres extra

        dsn = "postgresql://nobody@/postgres?host=/nonexistent-socket-dir&port=1"
        with pytest.raises(ArtifactOwnerError, match="connect") as caught:
            PostgresOwner(dsn)
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)

    def test_a_dropped_schema_is_an_owner_error(self) -> None:
        self.admin(f'DROP SCHEMA "{self.schema}" CASCADE')
        with pytest.raises(ArtifactOwnerError) as caught:
            self.owner.remove("tx-any")
        assert caught.value.__cause__ is not None

    def test_transient_failures_are_retried(self) -> None:
        from psycopg import errors  # noqa: PLC0415 - the postgres extra

        owner = PostgresOwner(self.dsn, schema=self.schema)
        real_connect = owner._connect
        calls: list[int] = []

        def flaky_connect() -> Any:
            calls.append(1)
            if len(calls) < 3:
                cause = errors.DeadlockDetected("deadlock detected")
                raise ArtifactOwnerError("PostgreSQL owner lock failed") from cause
            return real_connect()

        owner._connect = flaky_connect  # type: ignore[method-assign]
        owner.publish("tx-retried", self.make_reference())
        assert len(calls) == 3
        assert self.observe("tx-retried").presence is PUBLISHED

    def test_retries_give_up_and_other_errors_are_not_retried(self) -> None:
        from psycopg import errors  # noqa: PLC0415 - the postgres extra

        owner = PostgresOwner(self.dsn, schema=self.schema)
        calls: list[type[Exception]] = []

        def failing_connect(kind: type[Exception]) -> Any:
            calls.append(kind)
            raise ArtifactOwnerError("PostgreSQL owner connect failed") from kind()

        for kind, attempts in (
            (errors.SerializationFailure, ATTEMPTS),
            (errors.UndefinedTable, 1),
        ):
            calls.clear()
            owner._connect = lambda kind=kind: failing_connect(kind)  # type: ignore[method-assign]
            with pytest.raises(ArtifactOwnerError):
                owner.publish("tx-failing", self.make_reference())
            assert len(calls) == attempts


def test_an_operator_never_creates_an_owner_by_mistake(
    tmp_path: Path, postgres_dsn: str
) -> None:
    missing = tmp_path / "typo.sqlite3"
    with pytest.raises(ArtifactOwnerError, match="no SQLite owner database"):
        SQLiteOwner(missing, create=False)
    assert not missing.exists()
    empty = tmp_path / "empty.sqlite3"
    empty.touch(mode=0o600)
    with pytest.raises(ArtifactOwnerError, match="holds no owner table"):
        SQLiteOwner(empty, create=False)
    SQLiteOwner(tmp_path / "real.sqlite3")
    SQLiteOwner(tmp_path / "real.sqlite3", create=False)  # now it exists
    with pytest.raises(ArtifactOwnerError, match="no owner table"):
        PostgresOwner(postgres_dsn, schema="never_created_here", create=False)
