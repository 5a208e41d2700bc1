"""The session's event store: an `eventsourcing` Application over one backend (S4.4).

Commands load an aggregate, let the domain decide, and save; a lost optimistic
concurrency race surfaces as `ArtifactStoreConflict`, and `retrying()` reloads
and decides again. Library exceptions never leak: they are wrapped here.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections import deque
from itertools import takewhile
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, PersistenceError
from eventsourcing.utils import Environment

from spillvault.domain.artifact import Artifact
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactSessionReadOnlyError,
    ArtifactStoreConflict,
)
from spillvault.domain.lease import Lease
from spillvault.domain.numbering import ARTIFACT_NUMBERS_ID, ArtifactNumbers
from spillvault.domain.session_view import SESSION_VIEW_ID, SessionView
from spillvault.domain.store_identity import STORE_IDENTITY_ID, StoreIdentity

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from datetime import datetime

    from eventsourcing.domain import BaseAggregate, CanMutateProtocol
    from eventsourcing.persistence import (
        ApplicationRecorder,
        InfrastructureFactory,
        Notification,
    )

    from spillvault.domain.values import ArtifactLeaseTransaction

T = TypeVar("T")
DEFAULT_RETRIES = 16
_FIRST_PAUSE = 0.002
_MAX_PAUSE = 0.1
_PAGE = 500
_RECORDED = 16  # this process's latest recorded events kept for `recorded_after`
# eventsourcing wraps most driver errors in PersistenceError, but not all of
# SQLite's at connection time (a full disk, no inodes, a read-only directory).
STORE_ERRORS = (PersistenceError, sqlite3.Error)


class EventStoreBackend(Protocol):
    """Where a session's events live: one kind per module, each of this shape."""

    @property
    def kind(self) -> str:
        """The store's kind as the session marker records it."""
        ...

    def describe(self) -> str:
        """Name the store for messages (a path or a redacted DSN)."""
        ...

    def exists(self) -> bool:
        """Tell whether the store was created."""
        ...

    def create(self) -> None:
        """Create the empty store (its file, schema or table)."""
        ...

    def open(self) -> SessionStore:
        """Open the store for reading and recording events."""
        ...


class SessionStore(Application[UUID]):
    """One session's aggregates, in one store, under one notification log."""

    name = "spillvault"
    # Both singletons change with every spill or sync: a snapshot every few
    # versions keeps loading them O(1) whatever the session's history.
    snapshotting_intervals: ClassVar[dict[type[Any], int]] = {
        SessionView: 16,
        ArtifactNumbers: 32,
    }

    def __init__(
        self,
        env: dict[str, str],
        *,
        factory: Callable[[Environment], InfrastructureFactory[Any]] | None = None,
        recorder: ApplicationRecorder | None = None,
    ) -> None:
        self._factory = factory
        self._shared_recorder = recorder
        self._refusal: str | None = None
        self._recorded: deque[Notification] = deque(maxlen=_RECORDED)
        self._recorded_lock = threading.Lock()
        try:
            super().__init__(env=env)
        except STORE_ERRORS as error:
            msg = f"event store cannot be opened: {error}"
            raise ArtifactLeaseJournalError(msg) from error

    def construct_env(self, name: str, env: Any = None) -> Environment:
        """Use only the settings given here: never the process environment."""
        return Environment(name, {**dict(env or {}), "IS_SNAPSHOTTING_ENABLED": "y"})

    def construct_factory(self, env: Environment) -> InfrastructureFactory[Any]:
        """Use the backend's factory when it gives one."""
        if self._factory is not None:
            return self._factory(env)
        return super().construct_factory(env)

    def construct_recorder(self) -> ApplicationRecorder:
        """Use the recorder shared by every object on an in-memory session."""
        if self._shared_recorder is not None:
            return self._shared_recorder
        return super().construct_recorder()

    def refuse_writes(self, reason: str) -> None:
        """Make every later save raise `ArtifactSessionReadOnlyError(reason)`."""
        self._refusal = reason

    # identity ---------------------------------------------------------------

    def store_identity(self) -> StoreIdentity | None:
        """Return the store's identity, or None when it was never written."""
        return self._get(StoreIdentity, STORE_IDENTITY_ID)

    def record_identity(self, identity: StoreIdentity) -> None:
        """Write the identity (once; a second write is a conflict)."""
        self.save_aggregates(identity)

    def max_position(self) -> int:
        """Return the highest notification id (0 when empty)."""
        try:
            return self.recorder.max_notification_id() or 0
        except STORE_ERRORS as error:
            raise _store_error(error) from error

    def notifications(self, after: int = 0) -> Iterator[Notification]:
        """Yield every stored event after position `after`, in position order."""
        start = after
        while True:
            try:
                page = self.recorder.select_notifications(
                    start, _PAGE, inclusive_of_start=False
                )
            except STORE_ERRORS as error:
                raise _store_error(error) from error
            yield from page
            if len(page) < _PAGE:
                return  # a short page is the last: no query for an empty one
            start = page[-1].id

    def recorded_after(self, after: int) -> tuple[Notification, ...] | None:
        """Return the events this store saved just after `after`, or None.

        None unless this process recorded the event at `after + 1`; then the
        ones it recorded at `after + 2`, `after + 3`, ... up to its first gap.
        Positions only grow, so those are exactly the stored events from
        `after` on to the last of them: a caller that just saved can project
        them without reading them back.
        """
        with self._recorded_lock:
            # Newest first: saves end in id order but may be noted out of it
            # by threads racing here; a note missed so is read from the store.
            recorded = list(takewhile(lambda n: n.id > after, reversed(self._recorded)))
        run: list[Notification] = []
        for note in sorted(recorded, key=lambda note: note.id):
            if note.id != after + len(run) + 1:
                break
            run.append(note)
        return tuple(run) or None

    # leases -----------------------------------------------------------------

    def prepare_lease(self, transaction: ArtifactLeaseTransaction) -> Lease:
        """Record a prepared lease; a used transaction id raises (S4.8)."""
        lease = Lease.prepare(transaction)
        try:
            self.save_aggregates(lease)
        except ArtifactStoreConflict as error:
            msg = f"transaction id already used: {transaction.transaction_id!r}"
            raise ArtifactLeaseJournalError(msg) from error
        return lease

    def get_lease(self, transaction_id: str) -> Lease:
        """Load a lease, raising for an unknown transaction id."""
        lease = self._get(Lease, Lease.create_id(transaction_id))
        if lease is None:
            msg = f"unknown transaction id {transaction_id!r}"
            raise ArtifactLeaseJournalError(msg)
        return lease

    def get_lease_by_id(self, lease_id: UUID) -> Lease:
        """Load a lease by its aggregate id."""
        lease = self._get(Lease, lease_id)
        if lease is None:
            msg = f"unknown lease {lease_id}"
            raise ArtifactLeaseJournalError(msg)
        return lease

    def get_session_view(self) -> SessionView | None:
        """Load the saved lease view (S8.1), or None when never saved."""
        return self._get(SessionView, SESSION_VIEW_ID)

    def find_lease(self, transaction_id: str) -> Lease | None:
        """Load a lease if it exists."""
        return self._get(Lease, Lease.create_id(transaction_id))

    def lease_recorded(self, transaction_id: str) -> bool:
        """Tell whether the transaction id has any lease event (S4.8)."""
        lease_id = Lease.create_id(transaction_id)
        try:
            return bool(self.recorder.select_events(lease_id, limit=1))
        except STORE_ERRORS as error:
            raise _store_error(error) from error

    def commit_lease(
        self, transaction_id: str, at: datetime, *, saved: Lease | None = None
    ) -> Lease:
        """Move a prepared lease to committed (retrying lost races)."""
        return self._update_lease(transaction_id, lambda lease: lease.commit(at), saved)

    def release_lease(
        self, transaction_id: str, at: datetime, *, saved: Lease | None = None
    ) -> Lease:
        """Move a committed lease to released (retrying lost races)."""
        return self._update_lease(
            transaction_id, lambda lease: lease.release(at), saved
        )

    def abort_lease(
        self, transaction_id: str, at: datetime, *, saved: Lease | None = None
    ) -> Lease:
        """Move a prepared lease to aborted (retrying lost races)."""
        return self._update_lease(transaction_id, lambda lease: lease.abort(at), saved)

    def _update_lease(
        self,
        transaction_id: str,
        command: Callable[[Lease], None],
        saved: Lease | None,
    ) -> Lease:
        """Load, decide and save; first on `saved`, the lease as this process saved it.

        A stale `saved` lease (someone recorded an event since) cannot be
        saved over: its next version is taken, the save conflicts, and the
        lease is loaded and decided again as after any lost race.
        """
        if saved is not None:
            try:
                command(saved)
                self.save_aggregates(saved)
            except ArtifactStoreConflict:
                pass
            else:
                return saved

        def attempt() -> Lease:
            lease = self.get_lease(transaction_id)
            command(lease)
            self.save_aggregates(lease)
            return lease

        return retrying(attempt)

    # artifacts --------------------------------------------------------------

    def reserve_artifact_number(self, *, at_least: int = 1) -> int:
        """Take a number no artifact of this session ever had (S2.2)."""

        def attempt() -> int:
            numbers = self._get(ArtifactNumbers, ARTIFACT_NUMBERS_ID)
            if numbers is None:
                numbers = ArtifactNumbers.start()
            number = numbers.reserve(at_least=at_least)
            self.save_aggregates(numbers)
            return number

        return retrying(attempt)

    def get_artifact(self, filename: str) -> Artifact | None:
        """Load an artifact by filename if it has any event."""
        return self._get(Artifact, Artifact.create_id(filename))

    # plumbing ---------------------------------------------------------------

    def save_aggregates(self, *aggregates: BaseAggregate[UUID]) -> None:
        """Save atomically; a lost race raises `ArtifactStoreConflict`."""
        if self._refusal is not None:
            raise ArtifactSessionReadOnlyError(self._refusal)
        try:
            recordings = self.save(*aggregates)
        except IntegrityError as error:
            msg = "another writer recorded an event first"
            raise ArtifactStoreConflict(msg) from error
        except STORE_ERRORS as error:
            raise _store_error(error) from error
        with self._recorded_lock:
            self._recorded.extend(recording.notification for recording in recordings)

    def _get(self, kind: type[T], aggregate_id: UUID) -> T | None:
        try:
            if kind in self.snapshotting_intervals:
                aggregate: object = self.repository.get(aggregate_id)
            else:
                # Never snapshotted: its events alone, with no snapshot query.
                aggregate = _project(self.events.get(aggregate_id))
        except AggregateNotFoundError:
            return None
        except STORE_ERRORS as error:
            raise _store_error(error) from error
        if not isinstance(aggregate, kind):
            msg = f"aggregate {aggregate_id} is not a {kind.__name__}"
            raise ArtifactLeaseJournalError(msg)
        return aggregate


def retrying(
    attempt: Callable[[], T],
    *,
    retries: int = DEFAULT_RETRIES,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run `attempt` (load, decide, save) again after each lost race.

    Waits a jittered, doubling pause between tries so that writers in several
    processes stop colliding in lockstep.
    """
    pause = _FIRST_PAUSE
    for _ in range(retries - 1):
        try:
            return attempt()
        except ArtifactStoreConflict:
            sleep(random.uniform(0, pause))  # noqa: S311 - jitter, not secrecy
            pause = min(pause * 2, _MAX_PAUSE)
    return attempt()


def _project(events: Iterable[object]) -> object:
    """Fold an aggregate's events; raise `AggregateNotFoundError` for none."""
    aggregate = None
    for event in events:
        aggregate = cast("CanMutateProtocol[Any]", event).mutate(aggregate)
    if aggregate is None:
        msg = "no events"
        raise AggregateNotFoundError(msg)
    return aggregate


def _store_error(error: Exception) -> ArtifactLeaseJournalError:
    return ArtifactLeaseJournalError(f"event store failure: {error}")
