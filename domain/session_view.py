"""The session view: what opening a session needs, kept incrementally (S8.1).

One combined view per store with one tracking position: the last store
position folded in. It holds every live lease (in a phase the lease spec does
not call terminal), the name and state of every artifact the store has a
creation event for, and the journal checkpoint (end offset, sequence, hash of
the last record, S4.5), so opening a session folds only the events recorded
since the view was saved. The view is a cache of the event log: losing it
costs a replay, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.domain import AggregateCreated, AggregateEvent, BaseAggregate
from eventsourcing.domain import Snapshot as _Snapshot

from .artifact import ARTIFACT_STATE_AFTER
from .enums import ArtifactLeasePhase, ArtifactState
from .timestamps import parse_timestamp
from .values import ArtifactRetentionClaim

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

SESSION_VIEW_ID = UUID("9a3f5d27-81c4-4e0b-a6d2-3b7e0f1c5d94")
ZERO_HASH = "0" * 64


@dataclass(frozen=True)
class JournalCheckpoint:
    """Where the verified journal ends: offset, last sequence, hash and position."""

    end: int = 0
    sequence: int = 0
    sha256: str = ZERO_HASH
    position: int = 0


@dataclass(frozen=True)
class LiveLease:
    """A lease that still protects (or may protect) its artifact."""

    transaction_id: str
    phase: ArtifactLeasePhase
    claim: ArtifactRetentionClaim
    prepared_at: datetime

    def protects(self, now: datetime) -> bool:
        """Say whether it protects: prepared always (S4.7), committed until bound."""
        return self.phase is ArtifactLeasePhase.PREPARED or self.claim.is_active(now)

    @classmethod
    def from_entry(cls, transaction_id: str, entry: Mapping[str, Any]) -> LiveLease:
        """Rebuild from a view entry: its `phase`, `claim` and `prepared_at`."""
        return cls(
            transaction_id=transaction_id,
            phase=ArtifactLeasePhase(entry["phase"]),
            claim=ArtifactRetentionClaim.from_dict(entry["claim"]),
            prepared_at=parse_timestamp(entry["prepared_at"], "prepared_at"),
        )


class SessionView(BaseAggregate[UUID]):
    """The persisted session view; a singleton with a fixed id."""

    TOPIC = "spillvault:SessionView"

    if TYPE_CHECKING:  # annotations here would become __init__ parameters
        position: int
        journal: dict[str, Any]
        live: dict[str, dict[str, Any]]
        artifacts: dict[str, dict[str, Any]]

    class Snapshot(_Snapshot):
        """The whole view at one version, so loading it skips its history."""

        TOPIC = "spillvault:SessionView.Snapshot"

    class Event(AggregateEvent):
        """Base of the view's own events."""

        TOPIC = "spillvault:SessionView.Event"

    class Started(AggregateCreated):
        """The view exists and has folded nothing."""

        TOPIC = "spillvault:SessionView.Started"

        def apply(self, aggregate: Any) -> None:
            """Assign the empty view."""
            aggregate.position = 0
            aggregate.journal = _checkpoint_dict(JournalCheckpoint())
            aggregate.live = {}
            aggregate.artifacts = {}

    class Advanced(Event):
        """Events up to `position` were folded: leases changed, artifacts created."""

        TOPIC = "spillvault:SessionView.Advanced"
        position: int
        journal: dict[str, Any]
        changed: dict[str, dict[str, Any]]
        closed: list[str]
        artifacts: dict[str, dict[str, Any]]

        def apply(self, aggregate: Any) -> None:
            """Assign the new position, checkpoint, live leases and artifacts."""
            aggregate.position = self.position
            aggregate.journal = dict(self.journal)
            live = aggregate.live
            live.update(self.changed)
            for transaction_id in self.closed:
                live.pop(transaction_id, None)
            aggregate.artifacts.update(self.artifacts)

    @classmethod
    def start(cls) -> SessionView:
        """Create the empty view."""
        return cls._create(cls.Started, id=SESSION_VIEW_ID)

    def advance(
        self,
        position: int,
        checkpoint: JournalCheckpoint,
        changed: Mapping[str, Mapping[str, Any]],
        closed: Iterable[str],
        artifacts: Mapping[str, ArtifactRecord],
    ) -> None:
        """Record that everything up to `position` is folded in; entries by tx id."""
        self.trigger_event(
            self.Advanced,
            position=position,
            journal=_checkpoint_dict(checkpoint),
            changed=dict(changed),
            closed=list(closed),
            artifacts={name: record.to_entry() for name, record in artifacts.items()},
        )

    @property
    def checkpoint(self) -> JournalCheckpoint:
        """Return the journal checkpoint."""
        return JournalCheckpoint(**self.journal)

    def live_leases(self) -> dict[str, LiveLease]:
        """Return the live leases by transaction id."""
        return {tx: LiveLease.from_entry(tx, entry) for tx, entry in self.live.items()}


@dataclass(frozen=True)
class ArtifactRecord:
    """An artifact as the view knows it: its state and recorded content."""

    state: ArtifactState
    content_sha256: str | None = None
    size_bytes: int | None = None
    tool_use_id: str | None = None

    def to_entry(self) -> dict[str, Any]:
        """Return the primitive form the view's events carry."""
        return {
            "state": self.state.value,
            "content_sha256": self.content_sha256,
            "size_bytes": self.size_bytes,
            "tool_use_id": self.tool_use_id,
        }

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> ArtifactRecord:
        """Rebuild from `to_entry()` output."""
        return cls(
            ArtifactState(entry["state"]),
            entry["content_sha256"],
            entry["size_bytes"],
            entry.get("tool_use_id"),
        )


_STATE_AFTER = {
    topic: ArtifactState(state) for topic, state in ARTIFACT_STATE_AFTER.items()
}


def next_artifact_record(
    topic: str, fields: Mapping[str, Any], known: ArtifactRecord | None
) -> ArtifactRecord:
    """Return an artifact's record after the event `topic` with `fields`."""
    state = _STATE_AFTER.get(topic)
    if state is None:
        state = ArtifactState(fields["state"])  # Sealed, Restored
    tool_use_id = fields.get(
        "tool_use_id", None if known is None else known.tool_use_id
    )
    content = fields.get("content")
    if isinstance(content, dict):
        digest, size = content["content_sha256"], content["size_bytes"]
    elif known is not None:
        digest, size = known.content_sha256, known.size_bytes
    else:
        digest = size = None
    return ArtifactRecord(state, digest, size, tool_use_id)


def _checkpoint_dict(checkpoint: JournalCheckpoint) -> dict[str, Any]:
    return {
        "end": checkpoint.end,
        "sequence": checkpoint.sequence,
        "sha256": checkpoint.sha256,
        "position": checkpoint.position,
    }


def aggregate_claims(
    leases: Iterable[LiveLease], now: datetime
) -> tuple[ArtifactRetentionClaim, ...]:
    """Sum reference counts per artifact over the leases protecting it at `now`.

    The aggregated claim keeps the latest retain_until, none if any lease has
    none or is prepared (a prepared lease protects with no expiry, S4.7).
    """
    counts: dict[tuple[str, str], int] = {}
    until: dict[tuple[str, str], datetime | None] = {}
    for lease in leases:
        if not lease.protects(now):
            continue
        key = (lease.claim.source_id, lease.claim.content_sha256)
        counts[key] = counts.get(key, 0) + lease.claim.reference_count
        bound = (
            None
            if lease.phase is ArtifactLeasePhase.PREPARED
            else lease.claim.retain_until_time
        )
        if key not in until:
            until[key] = bound
        else:
            known = until[key]
            until[key] = None if known is None or bound is None else max(known, bound)
    return tuple(
        ArtifactRetentionClaim(source_id, digest, counts[key], until[key])
        for key in sorted(counts)
        for source_id, digest in [key]
    )
