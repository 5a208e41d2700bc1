"""Garbage-collection plans and reports, and the S6.1 decision table (pure).

A plan freezes what the scan saw of each entry (size, mtime_ns, st_dev,
st_ino, digest) so that apply can tell a file from its replacement. Plans and
reports hold filenames only, never paths (S6.4), and round-trip through
`to_dict()` / `from_dict()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from .bounds import MAX_SIZE, integer_problem, shown
from .enums import ArtifactCleanupStatus, ArtifactState
from .errors import ArtifactRetentionError
from .machines import ARTIFACT_MACHINE
from .timestamps import format_timestamp, parse_timestamp
from .values import ArtifactCleanupPolicy, artifact_number

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from datetime import datetime

Status = ArtifactCleanupStatus
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
    """One entry's status, with the reason and the live claims' reference count."""

    filename: str
    status: ArtifactCleanupStatus
    reference_count: int
    reason: str
    snapshot: FileSnapshot | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping (a filename, never a path)."""
        return {
            "filename": self.filename,
            "status": self.status.value,
            "reference_count": self.reference_count,
            "reason": self.reason,
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
            reason=str(data["reason"]),
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
    """Phase two of GC: what happened to each candidate (S6.2)."""

    session_id: str
    decisions: tuple[ArtifactCleanupDecision, ...]
    error: str | None = None
    dry_run: bool = False
    untouched: tuple[str, ...] = field(default=())

    @property
    def counts(self) -> dict[str, int]:
        """Each outcome that occurs, with its count."""
        return _counts(self.decisions)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping."""
        return {
            "session_id": self.session_id,
            "dry_run": self.dry_run,
            "error": self.error,
            "counts": self.counts,
            "decisions": [d.to_dict() for d in self.decisions],
            "untouched": list(self.untouched),
        }


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
    """Return the decision for a present entry: status and a readable reason."""
    status, reason = _classify(facts, now, orphan_ttl_seconds)
    return ArtifactCleanupDecision(
        facts.filename, status, facts.reference_count, reason, facts.snapshot
    )


def _classify(  # noqa: PLR0911 - one return per row of the S6.1 table
    facts: EntryFacts, now: datetime, ttl: float
) -> tuple[Status, str]:
    if facts.kind is not EntryKind.REGULAR:
        return Status.DENIED, f"a {facts.kind.value}: never touched"
    if artifact_number(facts.filename) is None:
        return Status.RETAINED_UNKNOWN, "not an artifact name of ours"
    state = facts.artifact_state
    if state is ArtifactState.OPEN or facts.being_written:
        return Status.RETAINED_OPEN, "still being written"
    if state not in _STORED or facts.snapshot is None:
        shown = "no" if state is None else state.value
        return Status.RETAINED_UNKNOWN, f"a file for an artifact in state {shown}"
    snapshot = facts.snapshot
    if any(d != snapshot.content_sha256 for d in facts.claim_digests) or (
        facts.recorded_sha256 not in {None, snapshot.content_sha256}
        or facts.recorded_size not in {None, snapshot.size_bytes}
    ):
        return Status.RETAINED_CORRUPT, "the file differs from its record or a claim"
    if facts.protected:
        count = facts.reference_count
        plural = "" if count == 1 else "s"
        return (
            Status.RETAINED_REFERENCED,
            f"protected by {count} live reference{plural}",
        )
    age = now.timestamp() - snapshot.mtime_ns / 1e9
    if age < ttl:
        return Status.RETAINED_RECENT, (
            f"unreferenced, {_duration(age)} old, under the TTL of {_duration(ttl)}"
        )
    return Status.PLANNED_DELETE, (
        f"unreferenced, {_duration(age)} old, past the TTL of {_duration(ttl)}"
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
            reason=f"over max_deletions ({max_deletions})",
        )
        if d.filename in over
        else d
        for d in decisions
    ]


def missing_decision(
    filename: str, *, reference_count: int, protected: bool, state: ArtifactState
) -> ArtifactCleanupDecision:
    """Return the decision for an artifact whose file is not in `tool-results/`."""
    if protected:
        return ArtifactCleanupDecision(
            filename,
            Status.MISSING_REFERENCED,
            reference_count,
            f"claimed, but the file is missing ({state.value})",
        )
    return ArtifactCleanupDecision(
        filename, Status.MISSING, reference_count, f"file missing ({state.value})"
    )
