"""The singleton that names an event store, so a marker can tell stores apart (S4.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import AggregateCreated, AggregateEvent, BaseAggregate

STORE_IDENTITY_ID = UUID("7d3f9a10-5c2b-4e8f-a1d6-0e4b8c2f6a95")
STORE_LAYOUT_VERSION = 1


class StoreIdentity(BaseAggregate[UUID]):
    """Holds the store id, written once at creation under a fixed aggregate id."""

    TOPIC = "spillvault:StoreIdentity"

    if TYPE_CHECKING:  # annotations here would become __init__ parameters
        store_id: str
        session_id: str
        layout_version: int
        created_at: str

    class Event(AggregateEvent):
        """Base of the identity's events (it has only its creation)."""

        TOPIC = "spillvault:StoreIdentity.Event"

    class Created(AggregateCreated):
        """The store was created for one session."""

        TOPIC = "spillvault:StoreIdentity.Created"
        store_id: str
        session_id: str
        layout_version: int
        created_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the identity."""
            aggregate.store_id = self.store_id
            aggregate.session_id = self.session_id
            aggregate.layout_version = self.layout_version
            aggregate.created_at = self.created_at

    @classmethod
    def create(cls, store_id: str, session_id: str, created_at: str) -> StoreIdentity:
        """Name a new store."""
        return cls._create(
            cls.Created,
            id=STORE_IDENTITY_ID,
            store_id=store_id,
            session_id=session_id,
            layout_version=STORE_LAYOUT_VERSION,
            created_at=created_at,
        )
