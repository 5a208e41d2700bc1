"""The S5.2 reconciliation table (pure): an owner's fenced observation, a lease's phase.

Two passes share one table. The pending pass settles PREPARED leases: a
confirmed reference commits, a sealed absence aborts. The release pass settles
COMMITTED leases whose removal died before RELEASED: a sealed absence releases.
Each cell gives the report's status and reason code and the step the service
takes inside the fence. A seal that does not take leaves the lease as it was
(`seal_problem`), so the tombstone always comes before ABORTED or RELEASED (S5.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from .enums import (
    ArtifactLeasePhase,
    ArtifactReconciliationReason,
    ArtifactReconciliationStatus,
    ArtifactReferencePresence,
)
from .machines import LEASE_MACHINE

if TYPE_CHECKING:
    from .values import ArtifactReferenceObservation, ArtifactRetentionClaim

Status = ArtifactReconciliationStatus
Reason = ArtifactReconciliationReason
Presence = ArtifactReferencePresence


class ReconciliationPass(Enum):
    """Which leases a reconciliation settles; the value is their phase."""

    PENDING = ArtifactLeasePhase.PREPARED
    RELEASES = ArtifactLeasePhase.COMMITTED


class ReconciliationStep(Enum):
    """What the service does inside the owner's fence."""

    NOTHING = "nothing"
    COMMIT = "commit"
    SEAL_THEN_ABORT = "seal_then_abort"
    SEAL_THEN_RELEASE = "seal_then_release"


@dataclass(frozen=True)
class ReconciliationDecision:
    """One cell of the table: the report's status and reason, and the step."""

    status: ArtifactReconciliationStatus
    reason: ArtifactReconciliationReason
    step: ReconciliationStep = ReconciliationStep.NOTHING


YOUNGER_THAN_MIN_AGE = ReconciliationDecision(
    Status.SKIPPED_YOUNG, Reason.LEASE_YOUNGER_THAN_MIN_AGE
)
"""A PREPARED lease younger than `min_age`: its publication may still be in flight."""
GENERATION_MOVED = ReconciliationDecision(
    Status.PENDING_STALE, Reason.OWNER_GENERATION_CHANGED
)
"""The owner's seal raised `ArtifactOwnerGenerationChanged`: observe again."""
OPERATOR_COMMITTED = ReconciliationDecision(Status.COMMITTED, Reason.OPERATOR_COMMIT)
"""An operator committed a pending lease the owner confirmed (`lease resolve`)."""
OPERATOR_ABORTED = ReconciliationDecision(Status.ABORTED, Reason.OPERATOR_ABORT)
"""An operator aborted a pending lease whose absence the owner sealed."""


def already(phase: ArtifactLeasePhase) -> ReconciliationDecision:
    """Return the report for a lease found decided (S5.4): already_<phase>."""
    return ReconciliationDecision(
        Status(f"already_{phase}"), Reason.LEASE_ALREADY_DECIDED
    )


def settled(
    reconciliation: ReconciliationPass, phase: ArtifactLeasePhase
) -> ReconciliationDecision | None:
    """Return the report for a lease this pass does not settle; None if it does."""
    if phase is reconciliation.value:
        return None
    if phase in LEASE_MACHINE.creation_states:
        # A PREPARED lease is the pending pass's: releasing it would skip COMMITTED.
        return ReconciliationDecision(
            Status.PENDING_UNKNOWN, Reason.LEASE_NOT_COMMITTED
        )
    return already(phase)


def confirms(
    observation: ArtifactReferenceObservation,
    transaction_id: str,
    claim: ArtifactRetentionClaim,
) -> bool:
    """Say whether the owner holds this transaction's reference, identity and all."""
    return (
        observation.transaction_id == transaction_id
        and observation.presence is Presence.PUBLISHED
        and observation.source_id == claim.source_id
        and observation.content_sha256 == claim.content_sha256
    )


def decide(  # noqa: PLR0911 - one return per row of S5.2
    reconciliation: ReconciliationPass,
    phase: ArtifactLeasePhase,
    observation: ArtifactReferenceObservation,
    *,
    transaction_id: str,
    claim: ArtifactRetentionClaim,
) -> ReconciliationDecision:
    """Return the S5.2 cell for a lease in `phase` and its owner's observation."""
    done = settled(reconciliation, phase)
    if done is not None:
        return done
    if observation.transaction_id != transaction_id:
        return ReconciliationDecision(
            Status.PENDING_CONFLICT, Reason.OWNER_TRANSACTION_MISMATCH
        )
    presence = observation.presence
    if presence is Presence.UNKNOWN:
        return ReconciliationDecision(
            Status.PENDING_UNKNOWN, Reason.OWNER_RESULT_UNKNOWN
        )
    releasing = reconciliation is ReconciliationPass.RELEASES
    if presence is Presence.PUBLISHED:
        confirmed = confirms(observation, transaction_id, claim)
        reason = (
            Reason.OWNER_CONFIRMED_REFERENCE
            if confirmed
            else Reason.OWNER_REFERENCE_MISMATCH
        )
        if releasing:
            return ReconciliationDecision(Status.STILL_PUBLISHED, reason)
        if confirmed:
            return ReconciliationDecision(
                Status.COMMITTED, reason, ReconciliationStep.COMMIT
            )
        return ReconciliationDecision(Status.PENDING_CONFLICT, reason)
    if releasing:
        return ReconciliationDecision(
            Status.RELEASED,
            Reason.OWNER_SEALED_ABSENCE,
            ReconciliationStep.SEAL_THEN_RELEASE,
        )
    return ReconciliationDecision(
        Status.ABORTED, Reason.OWNER_SEALED_ABSENCE, ReconciliationStep.SEAL_THEN_ABORT
    )


def seal_problem(
    transaction_id: str, sealed: ArtifactReferenceObservation
) -> ReconciliationDecision | None:
    """Return why a seal leaves the lease as it was; None if it sealed this absence."""
    if sealed.transaction_id != transaction_id:
        return ReconciliationDecision(
            Status.PENDING_CONFLICT, Reason.OWNER_TRANSACTION_MISMATCH
        )
    if not sealed.absence_sealed:
        return ReconciliationDecision(
            Status.PENDING_STALE, Reason.OWNER_ABSENCE_NOT_SEALED
        )
    return None


__all__ = [
    "GENERATION_MOVED",
    "OPERATOR_ABORTED",
    "OPERATOR_COMMITTED",
    "YOUNGER_THAN_MIN_AGE",
    "ReconciliationDecision",
    "ReconciliationPass",
    "ReconciliationStep",
    "already",
    "confirms",
    "decide",
    "seal_problem",
    "settled",
]
