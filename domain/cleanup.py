"""Garbage-collection plans and reports, and the S6.1 and S6.2 tables (pure).

A plan freezes what the scan saw of each entry (size, mtime_ns, st_dev,
st_ino, digest) so that apply can tell a file from its replacement. Every
decision carries a status, a reason code of `ArtifactCleanupReason` and a
sentence for people (`detail`). A report carries every decision of its plan,
the candidates' outcomes in place of their plans. Plans and reports hold
filenames only, never paths (S6.4); plans round-trip through `to_dict()` /
`from_dict()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from .bounds import MAX_SIZE, integer_problem, shown
from .enums import ArtifactCleanupReason, ArtifactCleanupStatus, ArtifactState
from .errors import ArtifactRetentionError
from .machines import ARTIFACT_MACHINE
from .timestamps import format_timestamp, parse_timestamp
from .values import ArtifactCleanupPolicy, artifact_number

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from datetime import datetime

    from .session_view import LiveLease
    from .values import ArtifactRetentionClaim

Status = ArtifactCleanupStatus
Reason = ArtifactCleanupReason
_STORED = ARTIFACT_MACHINE.tagged("stored")


class EntryKind(Enum):
    """What `lstat` says an entry of `tool-results/` is."""

    REGULAR = "regular file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    FIFO = "FIFO"
    SOCKET = "socket"
    DEVICE = "device"
    FOREIGN = "file that is not a private regular file of ours"


@dataclass(frozen=True)
class FileSnapshot:
    """What the scan froze of a regular file."""

    size_bytes: int
    mtime_ns: int
    st_dev: int
    st_ino: int
    content_sha256: str

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping."""
        return {
            "size_bytes": self.size_bytes,
            "mtime_ns": self.mtime_ns,
            "st_dev": self.st_dev,
            "st_ino": self.st_ino,
            "content_sha256": self.content_sha256,
        }


@dataclass(frozen=True)
class ArtifactCleanupDecision:
    """One entry's status, its reason code and detail, the live reference count."""

    filename: str
    status: ArtifactCleanupStatus
    reference_count: int
    reason: ArtifactCleanupReason
    detail: str = ""
    snapshot: FileSnapshot | None = None

    def __post_init__(self) -> None:
        """Demand a reason code of the vocabulary."""
        object.__setattr__(self, "reason", ArtifactCleanupReason(self.reason))

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping (a filename, never a path)."""
        return {
            "filename": self.filename,
            "status": self.status.value,
            "reference_count": self.reference_count,
            "reason": self.reason.value,
            "detail": self.detail,
            "snapshot": None if self.snapshot is None else self.snapshot.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArtifactCleanupDecision:
        """Rebuild a decision; a path in place of a filename is refused (S6.4)."""
        filename = data["filename"]
        if (
            not isinstance(filename, str)
            or filename in {"", ".", ".."}
            or "/" in filename
            or "\x00" in filename
        ):
            msg = f"a plan holds filenames, never paths: {shown(filename)}"
            raise ArtifactRetentionError(msg)
        count = data["reference_count"]
        problem = integer_problem("reference_count", count, 0, MAX_SIZE)
        if problem is not None:
            msg = f"a plan's decision for {filename}: {problem}"
            raise ArtifactRetentionError(msg)
        snapshot = data.get("snapshot")
        return cls(
            filename=filename,
            status=ArtifactCleanupStatus(data["status"]),
            reference_count=count,
            reason=ArtifactCleanupReason(data["reason"]),
            detail=str(data.get("detail", "")),
            snapshot=None if snapshot is None else FileSnapshot(**snapshot),
        )


def _counts(decisions: Iterable[ArtifactCleanupDecision]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for decision in decisions:
        counts[decision.status.value] = counts.get(decision.status.value, 0) + 1
    return dict(sorted(counts.items()))


@dataclass(frozen=True)
class ArtifactCleanupPlan:
    """Phase one of GC: every entry's status, frozen at `planned_at` (S6.1)."""

    session_id: str
    planned_at: datetime
    policy: ArtifactCleanupPolicy
    decisions: tuple[ArtifactCleanupDecision, ...]

    @property
    def counts(self) -> dict[str, int]:
        """Each status that occurs, with its count."""
        return _counts(self.decisions)

    @property
    def dry_run(self) -> bool:
        """Whether applying this plan may delete nothing."""
        return self.policy.dry_run

    def candidates(self) -> tuple[ArtifactCleanupDecision, ...]:
        """Return the `planned_delete` entries, oldest first."""
        planned = (d for d in self.decisions if d.status is Status.PLANNED_DELETE)
        return tuple(sorted(planned, key=_age_order))

    def check_session(self, session_id: str) -> None:
        """Refuse a plan made for another session (S6.4)."""
        if self.session_id != session_id:
            msg = f"plan belongs to session {self.session_id!r}, not {session_id!r}"
            raise ArtifactRetentionError(msg)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping."""
        policy = self.policy
        return {
            "session_id": self.session_id,
            "planned_at": format_timestamp(self.planned_at),
            "policy": {
                "orphan_ttl_seconds": policy.orphan_ttl_seconds,
                "max_deletions": policy.max_deletions,
                "dry_run": policy.dry_run,
            },
            "counts": self.counts,
            "decisions": [d.to_dict() for d in self.decisions],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArtifactCleanupPlan:
        """Rebuild a plan from `to_dict()` output."""
        try:
            return cls(
                session_id=str(data["session_id"]),
                planned_at=parse_timestamp(data["planned_at"], "planned_at"),
                policy=ArtifactCleanupPolicy(**data["policy"]),
                decisions=tuple(
                    ArtifactCleanupDecision.from_dict(d) for d in data["decisions"]
                ),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            if isinstance(error, ArtifactRetentionError):
                raise
            msg = f"not a cleanup plan: {error}"
            raise ArtifactRetentionError(msg) from error


@dataclass(frozen=True)
class ArtifactCleanupReport:
    """Phase two of GC (S6.2): every decision of the plan, candidates' outcomes in.

    A candidate the run did not reach (a dry run, or a run an error stopped)
    keeps its `planned_delete` decision and is named in `untouched`.
    """

    session_id: str
    planned_at: datetime
    applied_at: datetime
    dry_run: bool
    decisions: tuple[ArtifactCleanupDecision, ...]
    error: str | None = None
    untouched: tuple[str, ...] = field(default=())

    @property
    def counts(self) -> dict[str, int]:
        """Each status that occurs, with its count, over every decision."""
        return _counts(self.decisions)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping."""
        return {
            "session_id": self.session_id,
            "planned_at": format_timestamp(self.planned_at),
            "applied_at": format_timestamp(self.applied_at),
            "dry_run": self.dry_run,
            "error": self.error,
            "counts": self.counts,
            "decisions": [d.to_dict() for d in self.decisions],
            "untouched": list(self.untouched),
        }


def cleanup_report(
    plan: ArtifactCleanupPlan,
    outcomes: Iterable[ArtifactCleanupDecision],
    *,
    applied_at: datetime,
    error: str | None = None,
) -> ArtifactCleanupReport:
    """Return the report of applying `plan`: its decisions, outcomes in their place."""
    done = {outcome.filename: outcome for outcome in outcomes}
    return ArtifactCleanupReport(
        session_id=plan.session_id,
        planned_at=plan.planned_at,
        applied_at=applied_at,
        dry_run=plan.dry_run,
        decisions=tuple(done.get(d.filename, d) for d in plan.decisions),
        error=error,
        untouched=tuple(
            c.filename for c in plan.candidates() if c.filename not in done
        ),
    )


@dataclass(frozen=True)
class EntryFacts:
    """What the planner learned about one name in `tool-results/`."""

    filename: str
    kind: EntryKind
    artifact_state: ArtifactState | None = None
    being_written: bool = False
    recorded_sha256: str | None = None
    recorded_size: int | None = None
    snapshot: FileSnapshot | None = None
    claim_digests: tuple[str, ...] = ()
    reference_count: int = 0
    protected: bool = False


def explain(
    facts: EntryFacts, *, now: datetime, orphan_ttl_seconds: float
) -> ArtifactCleanupDecision:
    """Return the S6.1 decision for a present entry: status, reason and detail."""
    status, reason, detail = _classify(facts, now, orphan_ttl_seconds)
    return ArtifactCleanupDecision(
        facts.filename,
        status,
        facts.reference_count,
        reason,
        detail=detail,
        snapshot=facts.snapshot,
    )


_DENIED_REASONS = {
    EntryKind.SYMLINK: Reason.SYMBOLIC_LINK_NOT_OWNED,
    # Not private, not ours, or swapped for a link while opened: never read.
    EntryKind.FOREIGN: Reason.ARTIFACT_READ_DENIED,
}


def _classify(  # noqa: PLR0911 - one return per row of the S6.1 table
    facts: EntryFacts, now: datetime, ttl: float
) -> tuple[Status, Reason, str]:
    if facts.kind is not EntryKind.REGULAR:
        reason = _DENIED_REASONS.get(facts.kind, Reason.ARTIFACT_NOT_A_REGULAR_FILE)
        return Status.DENIED, reason, f"a {facts.kind.value}: never touched"
    if artifact_number(facts.filename) is None:
        return (
            Status.RETAINED_UNKNOWN,
            Reason.CLEANUP_PLAN_FILENAME_NOT_OWNED,
            "not an artifact name of ours",
        )
    state = facts.artifact_state
    if state is ArtifactState.OPEN or facts.being_written:
        return (
            Status.RETAINED_OPEN,
            Reason.ARTIFACT_STILL_BEING_WRITTEN,
            "still being written",
        )
    if state not in _STORED or facts.snapshot is None:
        shown = "no artifact record" if state is None else f"an artifact {state.value}"
        return (
            Status.RETAINED_UNKNOWN,
            Reason.ARTIFACT_NOT_STORED,
            f"a file for {shown}",
        )
    snapshot = facts.snapshot
    if any(d != snapshot.content_sha256 for d in facts.claim_digests):
        return (
            Status.RETAINED_CORRUPT,
            Reason.RETENTION_CLAIM_DIGEST_MISMATCH,
            "a claim names another digest than the file's",
        )
    digest_differs = facts.recorded_sha256 not in {None, snapshot.content_sha256}
    if digest_differs or facts.recorded_size not in {None, snapshot.size_bytes}:
        return (
            Status.RETAINED_CORRUPT,
            Reason.ARTIFACT_DIFFERS_FROM_RECORD,
            "the file's digest or size differs from its record",
        )
    if facts.protected:
        count = facts.reference_count
        plural = "" if count == 1 else "s"
        return (
            Status.RETAINED_REFERENCED,
            Reason.ACTIVE_MEMORY_RETENTION_CLAIM,
            f"protected by {count} live reference{plural}",
        )
    age = now.timestamp() - snapshot.mtime_ns / 1e9
    if age < ttl:
        return (
            Status.RETAINED_RECENT,
            Reason.UNREFERENCED_ARTIFACT_WITHIN_ORPHAN_TTL,
            f"unreferenced, {_duration(age)} old, under the TTL of {_duration(ttl)}",
        )
    return (
        Status.PLANNED_DELETE,
        Reason.EXPIRED_UNREFERENCED_ARTIFACT,
        f"unreferenced, {_duration(age)} old, past the TTL of {_duration(ttl)}",
    )


def _duration(seconds: float) -> str:
    """Render seconds as the largest whole-ish unit: 42 s, 5.0 min, 2.0 h, 3.5 d."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _age_order(decision: ArtifactCleanupDecision) -> tuple[int, str]:
    mtime = decision.snapshot.mtime_ns if decision.snapshot is not None else 0
    return mtime, decision.filename


def limit_deletions(
    decisions: list[ArtifactCleanupDecision], max_deletions: int | None
) -> list[ArtifactCleanupDecision]:
    """Keep the oldest `max_deletions` candidates planned; retain the rest (S6.1)."""
    candidates = sorted(
        (d for d in decisions if d.status is Status.PLANNED_DELETE), key=_age_order
    )
    over = (
        set()
        if max_deletions is None
        else {d.filename for d in candidates[max_deletions:]}
    )
    return [
        replace(
            d,
            status=Status.RETAINED_LIMIT,
            reason=Reason.CLEANUP_DELETION_LIMIT_REACHED,
            detail=f"over max_deletions ({max_deletions})",
        )
        if d.filename in over
        else d
        for d in decisions
    ]


def missing_decision(
    filename: str, *, reference_count: int, protected: bool, detail: str
) -> ArtifactCleanupDecision:
    """Return the decision for an artifact whose file is not in `tool-results/`."""
    if protected:
        return ArtifactCleanupDecision(
            filename,
            Status.MISSING_REFERENCED,
            reference_count,
            Reason.ACTIVE_RETENTION_CLAIM_HAS_NO_ARTIFACT,
            detail=f"claimed, but {detail}",
        )
    return ArtifactCleanupDecision(
        filename,
        Status.MISSING,
        reference_count,
        Reason.UNREFERENCED_ARTIFACT_MISSING,
        detail=detail,
    )


class ApplyOutcome(Enum):
    """What applying one candidate found (S6.2): its status, reason and detail."""

    DELETED = (
        Status.DELETED,
        Reason.EXPIRED_UNREFERENCED_ARTIFACT_DELETED,
        "verified and unlinked",
    )
    CLAIM_ADDED = (
        Status.RETAINED_REFERENCED,
        Reason.ACTIVE_CLAIM_ADDED_AFTER_CLEANUP_PLAN,
        "a claim appeared after planning",
    )
    ALREADY_GONE = (
        Status.ALREADY_MISSING,
        Reason.ARTIFACT_ALREADY_MISSING,
        "the file was already gone",
    )
    STATE_CHANGED = (
        Status.RACE_DETECTED,
        Reason.ARTIFACT_CHANGED_AFTER_CLEANUP_PLAN,
        "the artifact changed state",
    )
    FILE_CHANGED = (
        Status.RACE_DETECTED,
        Reason.ARTIFACT_CHANGED_AFTER_CLEANUP_PLAN,
        "the file was replaced or changed",
    )
    PUT_BACK = (
        Status.RACE_DETECTED,
        Reason.ARTIFACT_CHANGED_AFTER_CLEANUP_PLAN,
        "not the planned file: put back",
    )
    LEFT_IN_QUARANTINE = (
        Status.RACE_DETECTED,
        Reason.ARTIFACT_CHANGED_AFTER_CLEANUP_PLAN,
        "not the planned file: left in quarantine",
    )
    NAME_NOT_OWNED = (
        Status.DENIED,
        Reason.CLEANUP_PLAN_FILENAME_NOT_OWNED,
        "the plan names a file that is not an artifact of ours",
    )
    DELETE_DENIED = (
        Status.DENIED,
        Reason.ARTIFACT_DELETE_DENIED,
        "the system refused to move or unlink it",
    )

    def decide(
        self, planned: ArtifactCleanupDecision, reference_count: int
    ) -> ArtifactCleanupDecision:
        """Return the outcome for a planned candidate, with its live reference count."""
        status, reason, detail = self.value
        return replace(
            planned,
            status=status,
            reason=reason,
            detail=detail,
            reference_count=reference_count,
        )


@dataclass(frozen=True)
class ArtifactClaims:
    """The claims that bear on each artifact, by filename: digests and live counts."""

    digests: dict[str, tuple[str, ...]]
    counts: dict[str, int]

    @classmethod
    def from_leases(cls, leases: Iterable[LiveLease], now: datetime) -> ArtifactClaims:
        """Fold the live leases: every claim's digest; counts of those protecting."""
        return cls.from_claims((lease.claim, lease.protects(now)) for lease in leases)

    @classmethod
    def from_claims(
        cls, claims: Iterator[tuple[ArtifactRetentionClaim, bool]]
    ) -> ArtifactClaims:
        """Fold (claim, protects now) pairs."""
        digests: dict[str, list[str]] = {}
        counts: dict[str, int] = {}
        for claim, protects in claims:
            name = claim.parsed_source_id.filename
            digests.setdefault(name, []).append(claim.content_sha256)
            if protects:
                counts[name] = counts.get(name, 0) + claim.reference_count
        return cls({n: tuple(d) for n, d in digests.items()}, counts)

    def protects(self, filename: str) -> bool:
        """Say whether a live claim protects the artifact now."""
        return self.counts.get(filename, 0) > 0
