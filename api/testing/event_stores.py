"""A conformance test case for event-store backends, shipped in the package (S4.4).

A backend keeps one session's events: `open_session` builds it from the
`event_store=` argument, asks `exists()`, `create()` and `open()` of it, and
works through the `SessionStore` that `open()` returns. `EventStoreTestCase`
checks all of that, at two levels: the backend object itself (an empty store
made only when asked, the identity written once, atomic saves, positions,
refused writes) and whole sessions opened on it (the marker, reopening, lost
races, refusals of a missing store or marker, snapshots). Subclass it,
implement the three hooks and let unittest or pytest run it:

    class TestSQLiteEventStore(EventStoreTestCase):
        def session_kwargs(self) -> dict[str, Any]:
            return {}  # event_store=None: the SQLite default

        def create_backend(self, session_dir: str, store_id: UUID) -> SQLiteBackend:
            fd = self.open_directory(session_dir)
            return SQLiteBackend(OS_FILESYSTEM, fd, session_dir)

        def remove_store(self, session_dir: str, store_id: str) -> None:
            os.unlink(os.path.join(session_dir, "events.sqlite3"))

Each test works in a fresh temporary directory (`self.workdir`); sessions are
opened with a fixed clock (`create_clock()`, at `prepared_at`).
"""

# A unittest.TestCase for backend authors: unittest's assertions work under any
# runner and survive `python -O`, so pytest's assert style does not apply here.
# ruff: noqa: PT009, PT027

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar
from unittest import TestCase, mock
from uuid import UUID, uuid4

from spillvault.adapters.session import derive_store_id, open_session
from spillvault.adapters.storage.fs import DIR_FLAGS
from spillvault.adapters.storage.layout import MARKER_NAME
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactSessionReadOnlyError,
    ArtifactStoreConflict,
)
from spillvault.domain.lease import Lease
from spillvault.domain.numbering import ARTIFACT_NUMBERS_ID
from spillvault.domain.store_identity import StoreIdentity
from spillvault.domain.timestamps import format_timestamp
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)

if TYPE_CHECKING:
    from spillvault.adapters.session import Session
    from spillvault.adapters.storage.eventstore import EventStoreBackend, SessionStore
    from spillvault.domain.ports import Clock

T = TypeVar("T")

#: The session kinds every build of spillvault has, as `open_session` keywords.
BUILT_IN_KINDS: dict[str, dict[str, Any]] = {
    "sqlite": {},
    "memory": {"event_store": "memory"},
}
VIEW_TOPIC_PREFIX = "spillvault:SessionView"
"""The session view's saves (S8.1) come and go with closes; tests leave them out."""


class FixedClock:
    """A clock that always says the same time."""

    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        """Return the fixed time."""
        return self._now


class EventStoreTestCase(TestCase, ABC):
    """What every event-store backend must do, alone and under a session (S4.4)."""

    #: When the tests' leases are prepared (and what `create_clock()` says).
    prepared_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    workdir: str
    clock: Clock

    @abstractmethod
    def session_kwargs(self) -> dict[str, Any]:
        """Return the `open_session` keywords that pick this backend."""

    @abstractmethod
    def create_backend(self, session_dir: str, store_id: UUID) -> EventStoreBackend:
        """Return a backend object for the store of `session_dir` and `store_id`."""

    @abstractmethod
    def remove_store(self, session_dir: str, store_id: str) -> None:
        """Destroy a closed session's store behind spillvault's back."""

    def create_clock(self) -> Clock:
        """Return the clock sessions are opened with."""
        return FixedClock(self.prepared_at)

    def setUp(self) -> None:
        """Make `self.workdir` (removed after the test) and `self.clock`."""
        super().setUp()
        self.workdir = tempfile.mkdtemp(prefix="spillvault-event-store-")
        self.addCleanup(shutil.rmtree, self.workdir, ignore_errors=True)
        self.clock = self.create_clock()

    # builders -------------------------------------------------------------

    def session_path(self, name: str) -> str:
        """Return the path of the session directory `name` in `self.workdir`."""
        return os.path.join(self.workdir, name)

    def open_session(self, name: str, **options: Any) -> Session:
        """Open (or create) session `name` on this backend."""
        return open_session(
            self.session_path(name),
            clock=self.clock,
            **{**self.session_kwargs(), **options},
        )

    def open_directory(self, path: str) -> int:
        """Return a descriptor of directory `path`, closed after the test."""
        fd = os.open(path, DIR_FLAGS)
        self.addCleanup(os.close, fd)
        return fd

    def new_store(self, name: str) -> tuple[str, UUID, EventStoreBackend]:
        """Make a directory `name` and a backend for a new store in it."""
        path = self.session_path(name)
        os.mkdir(path, 0o700)
        store_id = uuid4()
        return path, store_id, self.create_backend(path, store_id)

    def open_store(self, backend: EventStoreBackend) -> SessionStore:
        """Open `backend`'s store; it is closed after the test."""
        store = backend.open()
        self.addCleanup(store.close)
        return store

    def reopen_store(self, name: str, store_id: str) -> SessionStore:
        """Open session `name`'s store through a new backend object."""
        backend = self.create_backend(self.session_path(name), UUID(store_id))
        return self.open_store(backend)

    def at(self, seconds: float) -> datetime:
        """Return the time `seconds` after `prepared_at`."""
        return self.prepared_at + timedelta(seconds=seconds)

    def transaction(
        self, session_id: str, transaction_id: str
    ) -> ArtifactLeaseTransaction:
        """Return a valid transaction on artifact 1 of the session."""
        digest = hashlib.sha256(transaction_id.encode()).hexdigest()
        source = ArtifactSourceId.for_artifact(
            session_id, "tool_result_001.txt", digest
        )
        claim = ArtifactRetentionClaim(str(source), digest)
        return ArtifactLeaseTransaction(transaction_id, claim, self.prepared_at)

    def read_marker(self, name: str) -> dict[str, Any]:
        """Return session `name`'s marker."""
        path = os.path.join(self.session_path(name), MARKER_NAME)
        with open(path, encoding="ascii") as marker:
            data: dict[str, Any] = json.load(marker)
        return data

    def present(self, value: T | None, what: str) -> T:
        """Return `value`, failing the test when it is None."""
        if value is None:
            raise self.failureException(f"no {what}")
        return value

    def event_topics(self, store: SessionStore) -> list[str]:
        """Return the topics of the store's events, session-view saves left out."""
        return [
            note.topic
            for note in store.notifications()
            if not note.topic.startswith(VIEW_TOPIC_PREFIX)
        ]

    # the backend alone ----------------------------------------------------

    def test_a_store_exists_only_once_created_and_starts_empty(self) -> None:
        """`exists()` is false until `create()`; the store opens empty."""
        path, store_id, backend = self.new_store("backend-empty")
        self.assertIsInstance(backend.kind, str)
        self.assertTrue(backend.kind)
        self.assertIsInstance(backend.describe(), str)
        self.assertFalse(backend.exists())
        backend.create()
        self.assertTrue(backend.exists())
        self.assertTrue(self.create_backend(path, store_id).exists())
        store = self.open_store(backend)
        self.assertIsNone(store.store_identity())
        self.assertEqual(store.max_position(), 0)
        self.assertEqual(list(store.notifications()), [])

    def test_the_identity_is_written_once_and_read_by_every_object(self) -> None:
        """A second identity is a conflict, from the same object or another."""
        path, store_id, backend = self.new_store("backend-identity")
        backend.create()
        store = self.open_store(backend)
        created_at = format_timestamp(self.prepared_at)
        store.record_identity(
            StoreIdentity.create(str(store_id), "backend-identity", created_at)
        )
        other = self.open_store(self.create_backend(path, store_id))
        identity = self.present(other.store_identity(), "identity")
        self.assertEqual(
            (identity.store_id, identity.session_id, identity.created_at),
            (str(store_id), "backend-identity", created_at),
        )
        for writer in (store, other):
            intruder = StoreIdentity.create(str(uuid4()), "intruder", created_at)
            with self.assertRaises(ArtifactStoreConflict):
                writer.record_identity(intruder)
        recorded = store.store_identity()
        self.assertEqual(recorded.store_id if recorded else None, str(store_id))
        self.assertEqual(other.max_position(), 1)

    def test_a_save_of_several_aggregates_is_all_or_nothing(self) -> None:
        """One conflicting aggregate in a save records none of the others."""
        _, _, backend = self.new_store("backend-atomic")
        backend.create()
        store = self.open_store(backend)
        store.save_aggregates(Lease.prepare(self.transaction("s", "tx-first")))
        fresh = Lease.prepare(self.transaction("s", "tx-fresh"))
        again = Lease.prepare(self.transaction("s", "tx-first"))
        with self.assertRaises(ArtifactStoreConflict) as caught:
            store.save_aggregates(fresh, again)
        self.assertIsInstance(caught.exception, ArtifactLeaseJournalError)
        self.assertIsNone(store.find_lease("tx-fresh"))
        self.assertEqual(store.max_position(), 1)
        self.assertEqual(len(list(store.notifications())), 1)

    def test_notifications_page_through_every_event_in_position_order(self) -> None:
        """More events than a page come back whole, in order, from any position."""
        path, store_id, backend = self.new_store("backend-pages")
        backend.create()
        store = self.open_store(backend)
        count = 1201  # more than two pages of `SessionStore.notifications`
        leases = [
            Lease.prepare(self.transaction("s", f"tx-{n:04d}")) for n in range(count)
        ]
        # in saves of 100: eventsourcing 9.5's PostgreSQL recorder hangs on a
        # save of more than about a thousand events (psycopg's pipeline stalls)
        for start in range(0, count, 100):
            store.save_aggregates(*leases[start : start + 100])
        positions = [note.id for note in store.notifications()]
        self.assertEqual(len(positions), count)
        self.assertEqual(positions, sorted(set(positions)))
        self.assertEqual(store.max_position(), positions[-1])
        rest = [note.id for note in store.notifications(after=positions[700])]
        self.assertEqual(rest, positions[701:])
        self.assertEqual(list(store.notifications(after=positions[-1])), [])
        reopened = self.open_store(self.create_backend(path, store_id))
        self.assertEqual([note.id for note in reopened.notifications()], positions)
        self.assertEqual(reopened.get_lease("tx-1200").phase_history, ["prepared"])

    def test_refused_writes_raise_read_only_and_record_nothing(self) -> None:
        """After `refuse_writes()` every save raises; reads still work."""
        _, _, backend = self.new_store("backend-refusing")
        backend.create()
        store = self.open_store(backend)
        store.prepare_lease(self.transaction("s", "tx-before"))
        store.refuse_writes("opened read-only for the test")
        with self.assertRaisesRegex(
            ArtifactSessionReadOnlyError, "opened read-only for the test"
        ):
            store.prepare_lease(self.transaction("s", "tx-after"))
        with self.assertRaises(ArtifactSessionReadOnlyError):
            store.commit_lease("tx-before", self.at(1))
        with self.assertRaises(ArtifactSessionReadOnlyError):
            store.reserve_artifact_number()
        self.assertEqual(store.get_lease("tx-before").phase_history, ["prepared"])
        self.assertIsNone(store.find_lease("tx-after"))
        self.assertEqual(store.max_position(), 1)

    # sessions on the backend: creation and reopening ----------------------

    def test_creation_writes_a_marker_naming_the_store(self) -> None:
        """The marker names the kind and the store; only the identity is stored."""
        with self.open_session("created") as session:
            kind, store_id = session.store_kind, session.store_id
            derived = derive_store_id(session.fs, session.dir_fd, session.path)
            self.assertEqual(store_id, str(derived))
            identity = self.present(session.store.store_identity(), "identity")
            self.assertEqual(
                (identity.store_id, identity.session_id), (store_id, "created")
            )
            self.assertEqual(session.store.max_position(), 1)
        marker = self.read_marker("created")
        self.assertEqual(marker["event_store"], kind)
        self.assertEqual(marker["store_id"], store_id)
        self.assertEqual(marker["session_id"], "created")
        backend = self.create_backend(self.session_path("created"), derived)
        self.assertEqual(backend.kind, kind)
        self.assertTrue(backend.exists())

    def test_leases_survive_closing_and_reopening(self) -> None:
        """Every phase, time and claim reads back the same after a reopen."""
        with self.open_session("leases") as session:
            store = session.store
            store.prepare_lease(self.transaction("leases", "memory-ref-1"))
            store.commit_lease("memory-ref-1", self.at(1))
            store.release_lease("memory-ref-1", self.at(2))
            store.prepare_lease(self.transaction("leases", "memory-ref-2"))
            store.abort_lease("memory-ref-2", self.at(3))
            store.prepare_lease(self.transaction("leases", "memory-ref-3"))
            store_id = session.store_id

        with self.open_session("leases") as session:
            self.assertEqual(session.store_id, store_id)
            first = session.store.get_lease("memory-ref-1")
            self.assertEqual(first.phase_history, ["prepared", "committed", "released"])
            self.assertEqual(first.version, 3)
            self.assertEqual(
                first.phase_times,
                {
                    phase: self.at(offset).isoformat()
                    for offset, phase in enumerate(
                        ("prepared", "committed", "released")
                    )
                },
            )
            self.assertEqual(
                first.claim, self.transaction("leases", "memory-ref-1").claim
            )
            second = session.store.get_lease("memory-ref-2")
            self.assertEqual(second.phase_history, ["prepared", "aborted"])
            self.assertEqual(second.version, 2)
            pending = session.store.get_lease("memory-ref-3")
            self.assertEqual(pending.phase_history, ["prepared"])
            self.assertTrue(pending.protects(self.at(3650 * 86400)))
            # identity + 3 + 2 + 1 lease events, in position order
            self.assertEqual(len(self.event_topics(session.store)), 7)
            # the reopened store keeps enforcing the lease machine
            with self.assertRaisesRegex(
                ArtifactLeaseJournalError, "illegal transition"
            ):
                session.store.commit_lease("memory-ref-2", self.at(4))
        # every event is where a new backend object finds it
        store = self.reopen_store("leases", store_id)
        self.assertEqual(len(self.event_topics(store)), 7)
        self.assertEqual(store.get_lease("memory-ref-2").version, 2)

    def test_a_reused_transaction_id_is_refused_across_objects(self) -> None:
        """A transaction id prepared by one object cannot be prepared by another."""
        with (
            self.open_session("reuse") as one,
            self.open_session("reuse") as other,
        ):
            one.store.prepare_lease(self.transaction("reuse", "tx-once"))
            before = other.store.max_position()
            with self.assertRaisesRegex(ArtifactLeaseJournalError, "already used"):
                other.store.prepare_lease(self.transaction("reuse", "tx-once"))
            self.assertEqual(other.store.get_lease("tx-once").version, 1)
            self.assertEqual(other.store.max_position(), before)

    def test_two_sessions_never_see_each_other(self) -> None:
        """Sessions have stores of their own, even for the same transaction id."""
        with (
            self.open_session("one") as one,
            self.open_session("two") as two,
        ):
            self.assertNotEqual(one.store_id, two.store_id)
            one.store.prepare_lease(self.transaction("one", "tx-shared-name"))
            one.store.commit_lease("tx-shared-name", self.at(1))
            two.store.prepare_lease(self.transaction("two", "tx-only-two"))

            self.assertIsNone(two.store.find_lease("tx-shared-name"))
            self.assertIsNone(one.store.find_lease("tx-only-two"))
            self.assertEqual(one.store.max_position(), 3)
            self.assertEqual(two.store.max_position(), 2)
            # the same transaction id is free in the other session
            two.store.prepare_lease(self.transaction("two", "tx-shared-name"))
            self.assertEqual(
                two.store.get_lease("tx-shared-name").phase_history, ["prepared"]
            )
            self.assertEqual(
                one.store.get_lease("tx-shared-name").phase_history,
                ["prepared", "committed"],
            )
            self.assertEqual(len(self.event_topics(one.store)), 3)
            self.assertEqual(len(self.event_topics(two.store)), 3)

    def test_an_interrupted_creation_is_finished_in_the_same_store(self) -> None:
        """A crash after the identity but before the marker: the next open ends it."""
        with self.open_session("interrupted") as session:
            store_id = session.store_id
        os.unlink(os.path.join(self.session_path("interrupted"), MARKER_NAME))

        with self.open_session("interrupted") as session:
            self.assertEqual(session.store_id, store_id)
            self.assertEqual(session.store.max_position(), 1)
            session.store.prepare_lease(self.transaction("interrupted", "tx-after"))
        self.assertEqual(self.read_marker("interrupted")["store_id"], store_id)
        self.assertEqual(
            len(self.event_topics(self.reopen_store("interrupted", store_id))), 2
        )

    def test_the_number_counter_loads_from_a_snapshot_not_its_history(self) -> None:
        """Loading the artifact-number counter does not replay every reservation."""
        with self.open_session("numbers") as session:
            numbers = [session.store.reserve_artifact_number() for _ in range(70)]
            self.assertEqual(numbers, list(range(1, 71)))
            snapshots = self.present(session.store.snapshots, "snapshot store")
            versions = [
                s.originator_version for s in snapshots.get(ARTIFACT_NUMBERS_ID)
            ]
            self.assertEqual(versions, [32, 64])
        with self.open_session("numbers") as session:
            self.assertEqual(session.store.reserve_artifact_number(), 71)

    def test_the_process_environment_cannot_redirect_the_store(self) -> None:
        """Environment variables eventsourcing reads never choose the store."""
        elsewhere = os.path.join(self.workdir, "elsewhere.db")
        for module in ("eventsourcing.popo", "eventsourcing.sqlite"):
            name = f"env-{module.rpartition('.')[2]}"
            redirect = {
                "PERSISTENCE_MODULE": module,
                "SPILLVAULT_PERSISTENCE_MODULE": module,
                "SQLITE_DBNAME": elsewhere,
                "SPILLVAULT_SQLITE_DBNAME": elsewhere,
                "POSTGRES_SCHEMA": "elsewhere",
            }
            with mock.patch.dict(os.environ, redirect), self.open_session(name) as s:
                s.store.prepare_lease(self.transaction(name, "tx-1"))
            with self.open_session(name) as again:
                self.assertEqual(again.store.get_lease("tx-1").state, "prepared")
            self.assertFalse(os.path.exists(elsewhere), module)

    def test_a_read_only_view_reads_and_records_nothing(self) -> None:
        """`mode="read"` reads the store and refuses every write."""
        with self.open_session("viewed") as session:
            session.store.prepare_lease(self.transaction("viewed", "tx-1"))
            store_id = session.store_id
        with self.open_session("viewed", mode="read") as view:
            self.assertEqual(view.store_id, store_id)
            self.assertEqual(view.store.get_lease("tx-1").phase_history, ["prepared"])
            before = view.store.max_position()
            with self.assertRaises(ArtifactSessionReadOnlyError):
                view.store.prepare_lease(self.transaction("viewed", "tx-2"))
            with self.assertRaises(ArtifactSessionReadOnlyError):
                view.store.commit_lease("tx-1", self.at(1))
            self.assertEqual(view.store.max_position(), before)
        with self.open_session("viewed") as session:
            self.assertIsNone(session.store.find_lease("tx-2"))
            self.assertEqual(session.store.get_lease("tx-1").version, 1)

    # refusals ---------------------------------------------------------------

    def test_a_removed_store_is_refused_and_never_recreated(self) -> None:
        """A session whose store is gone does not open, and no store appears."""
        with self.open_session("removed") as session:
            session.store.prepare_lease(self.transaction("removed", "tx-1"))
            store_id = session.store_id
        path = self.session_path("removed")
        self.remove_store(path, store_id)
        backend = self.create_backend(path, UUID(store_id))
        self.assertFalse(backend.exists())
        for _ in range(2):  # the failed open left nothing to "find" next time
            with self.assertRaisesRegex(
                ArtifactLeaseJournalError, "event store missing"
            ) as caught:
                self.open_session("removed")
            self.assertIn(backend.describe(), str(caught.exception))
            self.assertFalse(self.create_backend(path, UUID(store_id)).exists())

    def test_a_missing_marker_beside_stored_events_is_refused(self) -> None:
        """Without its marker a used session is refused, and nothing is rewritten."""
        with self.open_session("unmarked") as session:
            session.store.prepare_lease(self.transaction("unmarked", "tx-1"))
            store_id = session.store_id
        marker = os.path.join(self.session_path("unmarked"), MARKER_NAME)
        os.unlink(marker)
        with self.assertRaisesRegex(
            ArtifactLeaseJournalError, f"marker {re.escape(MARKER_NAME)} missing"
        ):
            self.open_session("unmarked")
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(
            len(self.event_topics(self.reopen_store("unmarked", store_id))), 2
        )

    def test_a_session_opened_with_another_kind_of_store_is_refused(self) -> None:
        """Opening with another backend names both kinds and changes nothing."""
        with self.open_session("kind") as session:
            session.store.prepare_lease(self.transaction("kind", "tx-1"))
            own = session.store_kind
        path = self.session_path("kind")
        marker = self.read_marker("kind")
        entries = sorted(os.listdir(path))
        foreign = {k: v for k, v in BUILT_IN_KINDS.items() if k != own}
        self.assertTrue(foreign)
        for kind, options in foreign.items():
            with self.assertRaisesRegex(
                ArtifactLeaseJournalError,
                f"created with the {own} event store, not {kind}",
            ):
                open_session(path, clock=self.clock, **options)
            self.assertEqual(sorted(os.listdir(path)), entries, kind)
            self.assertEqual(self.read_marker("kind"), marker, kind)
        with self.open_session("kind") as again:
            self.assertEqual(again.store.get_lease("tx-1").state, "prepared")

    # optimistic concurrency -------------------------------------------------

    def test_two_objects_on_one_session_lose_races_visibly(self) -> None:
        """The second writer of a stale aggregate gets `ArtifactStoreConflict`."""
        with (
            self.open_session("race") as one,
            self.open_session("race") as other,
        ):
            self.assertIsNot(one.store, other.store)
            self.assertIs(one.lock, other.lock)
            one.store.prepare_lease(self.transaction("race", "tx-race"))
            mine = one.store.get_lease("tx-race")
            theirs = other.store.get_lease("tx-race")

            mine.commit(self.at(1))
            one.store.save_aggregates(mine)
            theirs.abort(self.at(1))
            with self.assertRaises(ArtifactStoreConflict):
                other.store.save_aggregates(theirs)

            # the winner's event is the only one stored, seen from both objects
            for session in (one, other):
                lease = session.store.get_lease("tx-race")
                self.assertEqual(lease.phase_history, ["prepared", "committed"])
                self.assertEqual(lease.version, 2)
            self.assertEqual(other.store.max_position(), 3)

            # the loser's store still works: the retrying command path commits
            other.store.prepare_lease(self.transaction("race", "tx-fresh"))
            committed = other.store.commit_lease("tx-fresh", self.at(2))
            self.assertEqual(committed.phase_history, ["prepared", "committed"])
            self.assertEqual(one.store.get_lease("tx-fresh").version, 2)

    def test_a_retrying_command_reloads_and_decides_again(self) -> None:
        """After a lost race a command reloads; an illegal decision then raises."""
        with (
            self.open_session("retry") as one,
            self.open_session("retry") as other,
        ):
            one.store.prepare_lease(self.transaction("retry", "tx-retry"))
            stale = other.store.get_lease("tx-retry")
            one.store.abort_lease("tx-retry", self.at(1))

            loads: list[str] = []
            fresh_load = other.store.get_lease

            def load(transaction_id: str) -> Lease:
                loads.append(transaction_id)
                return stale if len(loads) == 1 else fresh_load(transaction_id)

            # 1st attempt: commit the stale copy -> conflict; 2nd: reload -> aborted
            with (
                mock.patch.object(other.store, "get_lease", load),
                self.assertRaisesRegex(
                    ArtifactLeaseJournalError, "illegal transition"
                ) as caught,
            ):
                other.store.commit_lease("tx-retry", self.at(2))
            self.assertNotIsInstance(caught.exception, ArtifactStoreConflict)
            self.assertEqual(loads, ["tx-retry", "tx-retry"])
            self.assertEqual(
                one.store.get_lease("tx-retry").phase_history, ["prepared", "aborted"]
            )
