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


class SizeUnit(StrEnum):
    """The unit a limit and its preview budget are measured in."""

    CHARS = "chars"
    BYTES = "bytes"
    TOKENS = "tokens"
