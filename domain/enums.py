"""Enumerations of the Public API; members are the upper-case form of their values."""

from __future__ import annotations

from enum import StrEnum


class ArtifactLeasePhase(StrEnum):
    """A lease's phase (S4.3); the names are the lease spec's states."""

    PREPARED = "prepared"
    COMMITTED = "committed"
    RELEASED = "released"
    ABORTED = "aborted"


class ArtifactState(StrEnum):
    """An artifact's state; the names are the artifact spec's states."""

    OPEN = "open"
    SEALED = "sealed"
    PARTIAL = "partial"
    ORPHAN = "orphan"
    QUARANTINED = "quarantined"
    LOST = "lost"
    DELETED = "deleted"


class ArtifactReferencePresence(StrEnum):
    """What a memory owner reports for one transaction id (S5.1)."""

    PUBLISHED = "published"
    ABSENT = "absent"
    UNKNOWN = "unknown"


class ArtifactReconciliationStatus(StrEnum):
    """Outcome of reconciling one lease with its owner (S5.2, S5.4)."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    RELEASED = "released"
    STILL_PUBLISHED = "still_published"
    PENDING_CONFLICT = "pending_conflict"
    PENDING_UNKNOWN = "pending_unknown"
    PENDING_STALE = "pending_stale"
    SKIPPED_YOUNG = "skipped_young"
    ALREADY_COMMITTED = "already_committed"
    ALREADY_ABORTED = "already_aborted"
    ALREADY_RELEASED = "already_released"


class ArtifactCleanupStatus(StrEnum):
    """A GC plan status (S6.1) or an apply outcome (S6.2)."""

    DENIED = "denied"
    RETAINED_UNKNOWN = "retained_unknown"
    RETAINED_OPEN = "retained_open"
    RETAINED_CORRUPT = "retained_corrupt"
    RETAINED_REFERENCED = "retained_referenced"
    RETAINED_RECENT = "retained_recent"
    RETAINED_LIMIT = "retained_limit"
    PLANNED_DELETE = "planned_delete"
    MISSING_REFERENCED = "missing_referenced"
    MISSING = "missing"
    DELETED = "deleted"
    ALREADY_MISSING = "already_missing"
    RACE_DETECTED = "race_detected"


class ArtifactCleanupReason(StrEnum):
    """Why a GC entry got its status (S6.1, S6.2); the seed's codes, then ours."""

    # The seed's vocabulary.
    EXPIRED_UNREFERENCED_ARTIFACT_DELETED = "expired_unreferenced_artifact_deleted"
    ACTIVE_MEMORY_RETENTION_CLAIM = "active_memory_retention_claim"
    RETENTION_CLAIM_DIGEST_MISMATCH = "retention_claim_digest_mismatch"
    ACTIVE_CLAIM_ADDED_AFTER_CLEANUP_PLAN = "active_claim_added_after_cleanup_plan"
    ARTIFACT_CHANGED_AFTER_CLEANUP_PLAN = "artifact_changed_after_cleanup_plan"
    ARTIFACT_ALREADY_MISSING = "artifact_already_missing"
    CLEANUP_DELETION_LIMIT_REACHED = "cleanup_deletion_limit_reached"
    ACTIVE_RETENTION_CLAIM_HAS_NO_ARTIFACT = "active_retention_claim_has_no_artifact"
    SYMBOLIC_LINK_NOT_OWNED = "symbolic_link_not_owned"
    ARTIFACT_NOT_A_REGULAR_FILE = "artifact_not_a_regular_file"
    ARTIFACT_READ_DENIED = "artifact_read_denied"
    ARTIFACT_DELETE_DENIED = "artifact_delete_denied"
    CLEANUP_PLAN_FILENAME_NOT_OWNED = "cleanup_plan_filename_not_owned"
    # Outcomes the seed has no code for (docs/contract.md lists them).
    EXPIRED_UNREFERENCED_ARTIFACT = "expired_unreferenced_artifact"
    UNREFERENCED_ARTIFACT_WITHIN_ORPHAN_TTL = "unreferenced_artifact_within_orphan_ttl"
    ARTIFACT_STILL_BEING_WRITTEN = "artifact_still_being_written"
    ARTIFACT_NOT_STORED = "artifact_not_stored"
    ARTIFACT_DIFFERS_FROM_RECORD = "artifact_differs_from_record"
    UNREFERENCED_ARTIFACT_MISSING = "unreferenced_artifact_missing"


class ArtifactReconciliationReason(StrEnum):
    """Why a reconciliation report has its status (S5.2, S5.4); seed's, then ours."""

    # The seed's vocabulary.
    OWNER_CONFIRMED_REFERENCE = "owner_confirmed_reference"
    OWNER_RESULT_UNKNOWN = "owner_result_unknown"
    OWNER_REFERENCE_MISMATCH = "owner_reference_mismatch"
    OWNER_GENERATION_CHANGED = "owner_generation_changed"
    OWNER_TRANSACTION_MISMATCH = "owner_transaction_mismatch"
    OWNER_ABSENCE_NOT_SEALED = "owner_absence_not_sealed"
    OWNER_SEALED_ABSENCE = "owner_sealed_absence"
    # Outcomes the seed has no code for (docs/contract.md lists them).
    LEASE_ALREADY_DECIDED = "lease_already_decided"
    LEASE_NOT_COMMITTED = "lease_not_committed"
    LEASE_YOUNGER_THAN_MIN_AGE = "lease_younger_than_min_age"
    OPERATOR_COMMIT = "operator_commit"
    OPERATOR_ABORT = "operator_abort"


class SizeUnit(StrEnum):
    """The unit a limit and its preview budget are measured in."""

    CHARS = "chars"
    BYTES = "bytes"
    TOKENS = "tokens"
