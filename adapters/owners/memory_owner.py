"""The in-memory owner: the reference implementation for adapter authors (S5.1).

The record rules (what publish, remove and seal do) are shared by every shipped
owner in `owner_common`; what an adapter must supply is an exclusive lock per
transaction id and a place for the record. Here that is a `threading.Lock` and
a Python object, so the whole adapter fits on a page. Nothing survives the
process: use it in tests and as a model, not as a memory system.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from spillvault.adapters.owners.owner_common import (
    ArtifactOwnerError,
    FencedOwner,
    OwnerRecord,
    RecordState,
)
from spillvault.domain.enums import ArtifactReferencePresence
from spillvault.domain.errors import ArtifactPublicationRejected
from spillvault.domain.values import ArtifactReferenceObservation

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from spillvault.adapters.owners.owner_common import RecordSlot
    from spillvault.domain.values import ArtifactMemoryReference

DEFAULT_LOCK_TIMEOUT_SECONDS = 30.0


@dataclass
class _MemorySlot:
    """One id's lock and record; the record is touched only with the lock held."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    record: OwnerRecord = field(default_factory=OwnerRecord)

    def load(self) -> OwnerRecord:
        """Read the record."""
        return self.record

    def save(self, expected: OwnerRecord, record: OwnerRecord) -> None:
        """Replace the record; the held lock makes `expected` still current."""
        del expected  # only lock holders write, so the CAS cannot fail here
        self.record = record

    def commit(self) -> None:
        """Nothing to flush: an assignment is as durable as this owner gets."""


class InMemoryOwner(FencedOwner):
    """A memory owner in a dict, with knobs that simulate a real store's failures.

    The knobs are sets of transaction ids, public and mutable between calls:

    - `lose_receipt_for`: publish writes the reference, then raises
      `TimeoutError`, as when a reply is lost after the write (the lease stays
      PREPARED; reconciliation finds the reference PUBLISHED).
    - `reject_publish_for`: publish tombstones the id, then raises
      `ArtifactPublicationRejected`; nothing is written (the lease is ABORTED).
    - `unknown_for`: inspection answers UNKNOWN (with the real generation), as
      an owner that cannot tell; sealing still acts on the real record.
    - `move_generation_for`: every fence bumps the generation right after its
      observation is taken, as another writer would in an optimistic store, so
      `seal_absent()` raises `ArtifactOwnerGenerationChanged`. Exclusive fences
      make this impossible otherwise: it is the only way to reach pending_stale.

    `lock_timeout` bounds the wait for another holder of an id's fence; past it
    the call raises `ArtifactOwnerError`, as the database-backed owners do.
    """

    def __init__(
        self,
        *,
        lose_receipt_for: Iterable[str] = (),
        reject_publish_for: Iterable[str] = (),
        unknown_for: Iterable[str] = (),
        move_generation_for: Iterable[str] = (),
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
    ) -> None:
        self.lose_receipt_for = set(lose_receipt_for)
        self.reject_publish_for = set(reject_publish_for)
        self.unknown_for = set(unknown_for)
        self.move_generation_for = set(move_generation_for)
        self.lock_timeout = lock_timeout
        # Guards the dict only; each record is guarded by its own slot's lock, so
        # a fence on one id never delays another id.
        self._slots_guard = threading.Lock()
        self._slots: dict[str, _MemorySlot] = {}

    def publish(
        self, transaction_id: str, memory_reference: ArtifactMemoryReference
    ) -> None:
        """Write the reference, applying the publish knobs."""
        if transaction_id in self.reject_publish_for:
            self._reject(transaction_id)
        super().publish(transaction_id, memory_reference)
        if transaction_id in self.lose_receipt_for:
            msg = f"receipt for transaction id {transaction_id!r} lost after the write"
            raise TimeoutError(msg)

    @contextmanager
    def _locked_record(self, transaction_id: str) -> Iterator[_MemorySlot]:
        with self._slots_guard:
            slot = self._slots.setdefault(transaction_id, _MemorySlot())
        if not slot.lock.acquire(timeout=self.lock_timeout):
            msg = (
                f"fence on transaction id {transaction_id!r} still held after "
                f"{self.lock_timeout} s"
            )
            raise ArtifactOwnerError(msg)
        try:
            yield slot
        finally:
            slot.lock.release()

    def _observe(
        self, transaction_id: str, slot: RecordSlot
    ) -> ArtifactReferenceObservation:
        observation = super()._observe(transaction_id, slot)
        if transaction_id in self.move_generation_for:
            # Another writer slips in between the read and the CAS.
            record = slot.load()
            slot.save(record, replace(record, generation=record.generation + 1))
        if transaction_id in self.unknown_for:
            return ArtifactReferenceObservation(
                transaction_id,
                observation.generation,
                ArtifactReferencePresence.UNKNOWN,
            )
        return observation

    def _reject(self, transaction_id: str) -> None:
        with self._locked_record(transaction_id) as slot:
            record = slot.load()
            if record.state is RecordState.PUBLISHED:
                return  # already written: the ordinary publish rules answer
            if record.state is RecordState.ABSENT:
                # Tombstone first, so no retry or replay can land later (S5.1).
                slot.save(record, record.tombstoned())
        msg = f"transaction id {transaction_id!r} rejected by the owner: tombstoned"
        raise ArtifactPublicationRejected(msg)
