"""What the shipped memory owners share: record rules, the fence, SQL rows (S5.1).

Each owner keeps one record per transaction id (generation, state, reference)
and changes it only while holding that id's exclusive lock. The rules for what a
publish, a removal or a seal does to a record live here, once; an adapter only
says how it locks, reads and writes a record (`FencedOwner._locked_record`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from spillvault.domain.enums import ArtifactReferencePresence
from spillvault.domain.errors import (
    ArtifactOwnerGenerationChanged,
    ArtifactPublicationRejected,
)
from spillvault.domain.values import (
    ArtifactMemoryReference,
    ArtifactReferenceObservation,
    ArtifactSource,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from contextlib import AbstractContextManager

    from spillvault.domain.values import ArtifactLeaseTransaction

T = TypeVar("T")

RECORD_TABLE = "artifact_references"


class ArtifactOwnerError(RuntimeError):
    """An owner's store failed, timed out or holds a malformed row (cause kept).

    Deliberately not `ArtifactPublicationRejected`: a write's outcome is unknown,
    so the journal must leave the lease PREPARED for reconciliation (S4.6). And
    not `ConnectionError`: that is an `OSError`, which file-handling callers may
    catch for unrelated reasons.
    """


class RecordState(StrEnum):
    """What an owner holds for a transaction id; a tombstone is final (S5.3)."""

    PUBLISHED = "published"
    ABSENT = "absent"
    TOMBSTONED = "tombstoned"


def check_transaction_id(transaction_id: object) -> str:
    """Return `transaction_id` if it is a non-empty string without NUL."""
    if not isinstance(transaction_id, str) or not transaction_id:
        msg = f"transaction id must be a non-empty string, not {transaction_id!r}"
        raise ValueError(msg)
    if "\x00" in transaction_id:
        msg = f"transaction id must not contain NUL: {transaction_id!r}"
        raise ValueError(msg)
    return transaction_id


def reference_to_json(reference: ArtifactMemoryReference) -> str:
    """Serialise a memory reference canonically (sorted keys, compact, ASCII)."""
    return json.dumps(reference.to_dict(), sort_keys=True, separators=(",", ":"))


def reference_from_dict(data: Any) -> ArtifactMemoryReference:
    """Rebuild a memory reference from `to_dict()` output; ValueError if malformed."""
    source = data["source"]
    fields = (
        data["summary"],
        data["artifact_path"],
        data["content_sha256"],
        data["source_tool"],
        source["source_id"],
        source["title"],
        source["captured_at"],
        source["source_type"],
    )
    if not all(isinstance(field, str) for field in fields):
        msg = "memory reference fields must be strings"
        raise TypeError(msg)
    return ArtifactMemoryReference(
        summary=data["summary"],
        artifact_path=data["artifact_path"],
        content_sha256=data["content_sha256"],
        source_tool=data["source_tool"],
        source=ArtifactSource(
            source_id=source["source_id"],
            title=source["title"],
            captured_at=source["captured_at"],
            source_type=source["source_type"],
        ),
    )


@dataclass(frozen=True)
class OwnerRecord:
    """One transaction id's record; generation 0 means never written."""

    generation: int = 0
    state: RecordState = RecordState.ABSENT
    reference: ArtifactMemoryReference | None = None

    def __post_init__(self) -> None:
        """Refuse records that contradict themselves."""
        if self.generation < 0:
            msg = f"generation must be >= 0, not {self.generation}"
            raise ValueError(msg)
        if (self.state is RecordState.PUBLISHED) != (self.reference is not None):
            msg = f"a {self.state.value} record cannot hold {self.reference!r}"
            raise ValueError(msg)

    def observe(self, transaction_id: str) -> ArtifactReferenceObservation:
        """Return what an inspection reports for this record."""
        if self.reference is not None:
            return ArtifactReferenceObservation(
                transaction_id,
                self.generation,
                ArtifactReferencePresence.PUBLISHED,
                source_id=self.reference.source.source_id,
                content_sha256=self.reference.content_sha256,
            )
        return ArtifactReferenceObservation(
            transaction_id,
            self.generation,
            ArtifactReferencePresence.ABSENT,
            absence_sealed=self.state is RecordState.TOMBSTONED,
        )

    def published(
        self, transaction_id: str, reference: ArtifactMemoryReference
    ) -> OwnerRecord | None:
        """Return the record holding `reference`, or None if it already does."""
        if self.state is RecordState.TOMBSTONED:
            msg = f"transaction id {transaction_id!r} is tombstoned: nothing written"
            raise ArtifactPublicationRejected(msg)
        if self.reference is None:
            return OwnerRecord(self.generation + 1, RecordState.PUBLISHED, reference)
        if self.reference == reference:
            return None
        # Not a rejection: the id holds a live reference that must stay (S4.6).
        msg = (
            f"transaction id {transaction_id!r} already holds a different reference "
            f"({self.reference.source.source_id}, not {reference.source.source_id})"
        )
        raise ValueError(msg)

    def removed(self) -> OwnerRecord | None:
        """Return the tombstone replacing the reference, or None if it holds none.

        A removed id is sealed, not merely empty: a late replay of its publish
        (a zombie writer's retry) must never revive a reference whose lease is
        RELEASED and whose artifact GC may delete (S4.8, S5.3).
        """
        if self.reference is None:
            return None
        return self.tombstoned()

    def tombstoned(self) -> OwnerRecord:
        """Return the sealed absence that follows this record."""
        return OwnerRecord(self.generation + 1, RecordState.TOMBSTONED)

    def sealed(self, transaction_id: str, observed: int) -> OwnerRecord | None:
        """Return the tombstone replacing this record, or None if already sealed.

        `observed` is the generation the fence vouched for: any other means a
        write got in since, so the decision taken on it is stale.
        """
        if self.generation != observed:
            msg = (
                f"generation of transaction id {transaction_id!r} moved from "
                f"{observed} to {self.generation}"
            )
            raise ArtifactOwnerGenerationChanged(msg)
        if self.reference is not None:
            msg = f"transaction id {transaction_id!r} holds a published reference"
            raise ArtifactOwnerGenerationChanged(msg)
        if self.state is RecordState.TOMBSTONED:
            return None
        return self.tombstoned()

    def to_row(self) -> tuple[int, str, str | None, str | None, str | None]:
        """Return (generation, state, source_id, content_sha256, reference JSON)."""
        if self.reference is None:
            return (self.generation, self.state.value, None, None, None)
        return (
            self.generation,
            self.state.value,
            self.reference.source.source_id,
            self.reference.content_sha256,
            reference_to_json(self.reference),
        )

    @classmethod
    def from_row(
        cls, transaction_id: str, generation: object, state: object, reference: object
    ) -> OwnerRecord:
        """Rebuild a record from a stored row (reference as JSON text or decoded)."""
        try:
            if isinstance(generation, bool) or not isinstance(generation, int):
                msg = f"generation must be an integer, not {generation!r}"
                raise TypeError(msg)
            if not isinstance(state, str):
                msg = f"state must be a string, not {state!r}"
                raise TypeError(msg)
            data = json.loads(reference) if isinstance(reference, str) else reference
            return cls(
                generation,
                RecordState(state),
                None if data is None else reference_from_dict(data),
            )
        except (TypeError, ValueError, KeyError) as error:
            msg = f"stored row for transaction id {transaction_id!r} is malformed"
            raise ArtifactOwnerError(msg) from error


class RecordSlot(Protocol):
    """One transaction id's record, reachable only while its lock is held."""

    def load(self) -> OwnerRecord:
        """Read the record (a default record for a never-seen id)."""
        ...

    def save(self, expected: OwnerRecord, record: OwnerRecord) -> None:
        """Replace `expected` by `record` if the generation is still `expected`'s."""
        ...

    def commit(self) -> None:
        """Make saved changes durable now; the lock may end with it."""
        ...


class RecordFence:
    """The fence the shipped owners yield (S5.1): an observation and a CAS seal."""

    def __init__(
        self,
        transaction_id: str,
        slot: RecordSlot,
        observation: ArtifactReferenceObservation,
    ) -> None:
        self._transaction_id = transaction_id
        self._slot = slot
        self._observation = observation
        # The generation this fence vouches for: the observation's, then its own
        # seal's, so that sealing twice under one fence is a no-op, not a conflict.
        self._vouched = observation.generation
        self._held = True

    @property
    def observation(self) -> ArtifactReferenceObservation:
        """What the owner held for the id when the fence was taken."""
        return self._observation

    def seal_absent(self) -> ArtifactReferenceObservation:
        """Tombstone the id by CAS (generation + 1); return the sealed observation."""
        if not self._held:
            msg = "seal_absent called after the fence exited"
            raise RuntimeError(msg)
        record = self._slot.load()
        sealed = record.sealed(self._transaction_id, self._vouched)
        if sealed is not None:
            self._slot.save(record, sealed)
            # Durable before returning: the caller records ABORTED next, and a
            # tombstone undone after ABORTED would let a late write land (S5.3).
            # A store's lock may end with the commit; nothing is lost, since no
            # operation changes a tombstoned record again.
            self._slot.commit()
            record = sealed
        self._vouched = record.generation
        return record.observe(self._transaction_id)

    def expire(self) -> None:
        """Refuse further seals: the owner has released the lock."""
        self._held = False


class FencedOwner(ABC):
    """The S5.1 owner operations over one exclusive lock per transaction id.

    An adapter implements `_locked_record`; every operation, the fence included,
    runs under that lock, so inspect, seal, publish and remove never interleave
    for one id. (A store may let go once a seal has committed: a tombstone is
    final, so nothing can move after it.)
    """

    # The fence a test may replace (a planted bug, issue 7); adapters keep it.
    _fence_type: type[RecordFence] = RecordFence

    @abstractmethod
    def _locked_record(self, transaction_id: str) -> AbstractContextManager[RecordSlot]:
        """Hold the id's exclusive lock; commit on a clean exit, roll back otherwise."""

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Run `operation`; adapters whose store reports transient conflicts retry."""
        return operation()

    def _observe(
        self, transaction_id: str, slot: RecordSlot
    ) -> ArtifactReferenceObservation:
        """Read the observation a fence yields."""
        return slot.load().observe(transaction_id)

    @contextmanager
    def inspect_fenced(
        self, transaction: ArtifactLeaseTransaction
    ) -> Iterator[RecordFence]:
        """Hold the id's exclusive fence; yield its observation and seal."""
        transaction_id = check_transaction_id(transaction.transaction_id)
        with ExitStack() as stack:
            # Only taking the lock is retried: once the caller's block has run,
            # running it again is not ours to decide.
            slot = self._retrying(
                lambda: stack.enter_context(self._locked_record(transaction_id))
            )
            fence = self._fence_type(
                transaction_id, slot, self._observe(transaction_id, slot)
            )
            try:
                yield fence
            finally:
                fence.expire()

    def publish(
        self, transaction_id: str, memory_reference: ArtifactMemoryReference
    ) -> None:
        """Write the reference (generation + 1); refused once the id is tombstoned."""
        check_transaction_id(transaction_id)

        def change(record: OwnerRecord) -> OwnerRecord | None:
            return record.published(transaction_id, memory_reference)

        self._retrying(partial(self._change, transaction_id, change))

    def remove(self, transaction_id: str) -> None:
        """Delete the reference and seal the id (generation + 1); no-op if none."""
        check_transaction_id(transaction_id)
        self._retrying(partial(self._change, transaction_id, OwnerRecord.removed))

    def publisher(
        self, memory_reference: ArtifactMemoryReference, transaction_id: str
    ) -> Callable[[], None]:
        """Return the zero-argument publisher the journal calls (S4.6)."""
        return partial(self.publish, transaction_id, memory_reference)

    def remover(self, transaction_id: str) -> Callable[[], None]:
        """Return the zero-argument remover the journal calls (S4.9)."""
        return partial(self.remove, transaction_id)

    def _change(
        self, transaction_id: str, change: Callable[[OwnerRecord], OwnerRecord | None]
    ) -> None:
        with self._locked_record(transaction_id) as slot:
            record = slot.load()
            updated = change(record)
            if updated is not None:
                slot.save(record, updated)


@contextmanager
def wrapped_errors(
    errors: type[Exception] | tuple[type[Exception], ...], what: str
) -> Iterator[None]:
    """Re-raise a database driver's `errors` as `ArtifactOwnerError`, cause kept."""
    try:
        yield
    except errors as error:
        msg = f"{what} failed: {error}"
        raise ArtifactOwnerError(msg) from error


class SQLCursor(Protocol):
    """The part of a DB-API cursor the SQL owners use."""

    @property
    def rowcount(self) -> int:
        """Rows the last statement changed."""
        ...

    def fetchone(self) -> Any:
        """Return the next row, or None."""
        ...


class SQLConnection(Protocol):
    """The part of a sqlite3 or psycopg connection the SQL owners use."""

    def execute(self, query: str, params: Sequence[Any], /) -> SQLCursor:
        """Run one parameterised statement."""
        ...


@dataclass(frozen=True)
class RecordStatements:
    """The two statements on the record table, in one driver's placeholder style."""

    select: str
    upsert: str

    @classmethod
    def for_table(cls, table: str, placeholder: str) -> RecordStatements:
        """Build them for `table`: a trusted, already-quoted name (hence S608)."""
        p = placeholder
        columns = "transaction_id, generation, state, source_id, content_sha256"
        return cls(
            select=(
                "SELECT generation, state, memory_reference "  # noqa: S608
                f"FROM {table} WHERE transaction_id = {p}"
            ),
            # The CAS: the update applies only if the row version is unchanged;
            # a never-written id has no row, so the insert branch is its version 0.
            upsert=(
                f"INSERT INTO {table} AS held ({columns}, memory_reference) "  # noqa: S608
                f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}) "
                "ON CONFLICT (transaction_id) DO UPDATE SET "
                "generation = excluded.generation, state = excluded.state, "
                "source_id = excluded.source_id, "
                "content_sha256 = excluded.content_sha256, "
                f"memory_reference = excluded.memory_reference "
                f"WHERE held.generation = {p}"
            ),
        )


class SQLRecordSlot:
    """A record reached through a SQL transaction that holds the id's lock."""

    def __init__(  # noqa: PLR0913 - a slot is its connection, id, SQL and driver
        self,
        connection: SQLConnection,
        transaction_id: str,
        statements: RecordStatements,
        *,
        errors: type[Exception],
        what: str,
        commit: Callable[[], object],
    ) -> None:
        self._connection = connection
        self._transaction_id = transaction_id
        self._statements = statements
        self._errors = errors
        self._what = what
        self._commit = commit

    def load(self) -> OwnerRecord:
        """Read the record (a default record for a never-seen id)."""
        with wrapped_errors(self._errors, f"{self._what} read"):
            row = self._connection.execute(
                self._statements.select, (self._transaction_id,)
            ).fetchone()
        if row is None:
            return OwnerRecord()
        return OwnerRecord.from_row(self._transaction_id, *row)

    def save(self, expected: OwnerRecord, record: OwnerRecord) -> None:
        """Write `record` by CAS on `expected`'s generation (the row version)."""
        with wrapped_errors(self._errors, f"{self._what} write"):
            changed = self._connection.execute(
                self._statements.upsert,
                (self._transaction_id, *record.to_row(), expected.generation),
            ).rowcount
        if changed != 1:
            # Under the lock this means a writer that bypasses the fence.
            msg = (
                f"row version of transaction id {self._transaction_id!r} moved "
                f"from {expected.generation} under the fence"
            )
            raise ArtifactOwnerGenerationChanged(msg)

    def commit(self) -> None:
        """Make saved changes durable now; the transaction's lock ends with it."""
        with wrapped_errors(self._errors, f"{self._what} commit"):
            self._commit()
