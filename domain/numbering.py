"""The artifact-number counter in the event store: numbers are never reused (S2.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import AggregateCreated, AggregateEvent, BaseAggregate
from eventsourcing.domain import Snapshot as _Snapshot

ARTIFACT_NUMBERS_ID = UUID("3e8b6c1f-0d4a-4f2e-b7a9-9c5d1e2f4a60")


class ArtifactNumbers(BaseAggregate[UUID]):
    """A session's highest reserved artifact number; a singleton with a fixed id."""

    TOPIC = "spillvault:ArtifactNumbers"

    if TYPE_CHECKING:  # annotations here would become __init__ parameters
        last: int

    class Snapshot(_Snapshot):
        """The counter at one version, so loading it skips its history."""

        TOPIC = "spillvault:ArtifactNumbers.Snapshot"

    class Event(AggregateEvent):
        """Base of the counter's events."""

        TOPIC = "spillvault:ArtifactNumbers.Event"

    class Started(AggregateCreated):
        """The counter exists; no number is taken yet."""

        TOPIC = "spillvault:ArtifactNumbers.Started"

        def apply(self, aggregate: Any) -> None:
            """Assign the empty counter."""
            aggregate.last = 0

    class Reserved(Event):
        """One number was taken for good."""

        TOPIC = "spillvault:ArtifactNumbers.Reserved"
        number: int

        def apply(self, aggregate: Any) -> None:
            """Assign the new highest number."""
            aggregate.last = self.number

    @classmethod
    def start(cls) -> ArtifactNumbers:
        """Create the counter."""
        return cls._create(cls.Started, id=ARTIFACT_NUMBERS_ID)

    def reserve(self, *, at_least: int = 1) -> int:
        """Take the next number, above every number taken and `at_least - 1`."""
        number = max(self.last + 1, at_least)
        self.trigger_event(self.Reserved, number=number)
        return number
