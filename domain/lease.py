"""The event-sourced Lease aggregate (S4.3, S8.1, S8.2)."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid5

from eventsourcing.domain import AggregateCreated, AggregateEvent, BaseAggregate

from .enums import ArtifactLeasePhase
from .machines import LEASE_MACHINE
from .timestamps import format_timestamp, parse_timestamp
from .values import (
    ArtifactLeaseState,
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
)

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

_LEASE_IDS = UUID("5f1c7a52-2d1e-4a53-9d0e-6b1f3c7e8a41")


class Lease(BaseAggregate[UUID]):
    """One transaction's promise to keep an artifact; its id derives from the tx id."""

    TOPIC = "spillvault:Lease"

    if TYPE_CHECKING:  # annotations here would become __init__ parameters
        transaction_id: str
        state: str
        claim_data: dict[str, Any]
        phase_history: list[str]
        prepared_at: str
        phase_times: dict[str, str]

    class Event(AggregateEvent):
        """Base of the lease's own events."""

        TOPIC = "spillvault:Lease.Event"

    class Prepared(AggregateCreated):
        """A publication was prepared; the lease protects with no expiry (S4.7)."""

        TOPIC = "spillvault:Lease.Prepared"
        STATE = ArtifactLeasePhase.PREPARED.value
        transaction_id: str
        claim: dict[str, Any]
        prepared_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the prepared state."""
            aggregate.transaction_id = self.transaction_id
            aggregate.claim_data = dict(self.claim)
            aggregate.prepared_at = self.prepared_at
            aggregate.state = self.STATE
            aggregate.phase_history = [aggregate.state]
            aggregate.phase_times = {aggregate.state: self.prepared_at}

    class Committed(Event):
        """The owner holds the reference."""

        TOPIC = "spillvault:Lease.Committed"
        TRIGGER = "commit"
        committed_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the phase `commit` leads to."""
            aggregate.enter(LEASE_MACHINE.state_after(self.TRIGGER), self.committed_at)

    class Released(Event):
        """The owner deleted the reference; the lease stops protecting."""

        TOPIC = "spillvault:Lease.Released"
        TRIGGER = "release"
        released_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the phase `release` leads to."""
            aggregate.enter(LEASE_MACHINE.state_after(self.TRIGGER), self.released_at)

    class Aborted(Event):
        """The publication never happened and can never land (tombstoned)."""

        TOPIC = "spillvault:Lease.Aborted"
        TRIGGER = "abort"
        aborted_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the phase `abort` leads to."""
            aggregate.enter(LEASE_MACHINE.state_after(self.TRIGGER), self.aborted_at)

    @staticmethod
    def create_id(transaction_id: str) -> UUID:
        """Derive the lease id, so a reused transaction id collides on save (S4.8)."""
        return uuid5(_LEASE_IDS, transaction_id)

    @classmethod
    def prepare(cls, transaction: ArtifactLeaseTransaction) -> Lease:
        """Create a prepared lease for `transaction`."""
        LEASE_MACHINE.check_creation(cls.Prepared.STATE)
        return cls._create(
            cls.Prepared,
            id=cls.create_id(transaction.transaction_id),
            transaction_id=transaction.transaction_id,
            claim=transaction.claim.to_dict(),
            prepared_at=format_timestamp(transaction.prepared_at),
        )

    def commit(self, committed_at: datetime) -> None:
        """Record that the owner holds the reference."""
        LEASE_MACHINE.decide(self.state, self.Committed.TRIGGER)
        self.trigger_event(self.Committed, committed_at=format_timestamp(committed_at))

    def release(self, released_at: datetime) -> None:
        """Record that the owner deleted the reference."""
        LEASE_MACHINE.decide(self.state, self.Released.TRIGGER)
        self.trigger_event(self.Released, released_at=format_timestamp(released_at))

    def abort(self, aborted_at: datetime) -> None:
        """Record that the publication is void."""
        LEASE_MACHINE.decide(self.state, self.Aborted.TRIGGER)
        self.trigger_event(self.Aborted, aborted_at=format_timestamp(aborted_at))

    def enter(self, phase: str, at: str) -> None:
        """Assign a new phase; called only from event bodies."""
        self.state = phase
        self.phase_history = [*self.phase_history, phase]
        self.phase_times = {**self.phase_times, phase: at}

    @property
    def phase(self) -> ArtifactLeasePhase:
        """Return the current phase."""
        return ArtifactLeasePhase(self.state)

    @property
    def claim(self) -> ArtifactRetentionClaim:
        """Return the claim the lease was prepared with."""
        return ArtifactRetentionClaim.from_dict(self.claim_data)

    @property
    def transaction(self) -> ArtifactLeaseTransaction:
        """Return the prepared transaction."""
        return ArtifactLeaseTransaction(
            transaction_id=self.transaction_id,
            claim=self.claim,
            prepared_at=parse_timestamp(self.prepared_at, "prepared_at"),
        )

    @property
    def lease_state(self) -> ArtifactLeaseState:
        """Return the transaction with every phase it went through."""
        return ArtifactLeaseState(
            transaction=self.transaction,
            phases=tuple(ArtifactLeasePhase(p) for p in self.phase_history),
        )

    def protects(self, now: datetime) -> bool:
        """Say whether this lease protects its artifact at `now` (S4.3, S4.7)."""
        if self.phase is ArtifactLeasePhase.PREPARED:
            return True
        return self.state in LEASE_MACHINE.live_states and self.claim.is_active(now)


LEASE_PHASE_AFTER: Mapping[str, str] = MappingProxyType(
    {Lease.Prepared.TOPIC: Lease.Prepared.STATE}
    | {
        event.TOPIC: LEASE_MACHINE.state_after(event.TRIGGER)
        for event in (Lease.Committed, Lease.Released, Lease.Aborted)
    }
)
"""The phase each lease event leads to."""
