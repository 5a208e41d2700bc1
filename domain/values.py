"""Value objects of the Public API that belong to the domain (S4.1, S4.2, S5)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from .bounds import MAX_SIZE, integer_problem, number_problem, shown
from .constants import DEFAULT_ORPHAN_TTL_SECONDS
from .enums import (
    ArtifactLeasePhase,
    ArtifactReconciliationReason,
    ArtifactReconciliationStatus,
    ArtifactReferencePresence,
)
from .errors import ArtifactRetentionError
from .timestamps import format_timestamp, parse_timestamp

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    # A type only (the seed's type of `ArtifactReference.path`): nothing here
    # touches a file; adapters build the paths.
    from pathlib import Path

SHA256_HEX = re.compile(r"[0-9a-f]{64}\Z")
# At most 20 digits, as the preview's worst case assumes: a longer run of digits
# names no artifact of ours, and int() refuses more than 4300 of them anyway.
ARTIFACT_NAME = re.compile(r"tool_result_(?P<number>[0-9]{3,20})\.txt\Z")
_SOURCE_ID = re.compile(
    r"artifact:(?P<session>[^:/\x00]+):(?P<filename>[^:/\x00]+):(?P<prefix>[0-9a-f]{12})\Z"
)


def artifact_filename(number: int) -> str:
    """Return the artifact name for `number`: three digits minimum (S2.1)."""
    if number < 1:
        msg = f"artifact number must be >= 1, not {number}"
        raise ValueError(msg)
    return f"tool_result_{number:03d}.txt"


def artifact_number(filename: str) -> int | None:
    """Return the number in a canonical artifact name, else None."""
    match = ARTIFACT_NAME.match(filename)
    if match is None:
        return None
    number = int(match["number"])
    return number if number >= 1 and artifact_filename(number) == filename else None


def check_session_id(session_id: str) -> str:
    """Return `session_id` if it is one path component without ':' or NUL (S2.1)."""
    if (
        not session_id
        or session_id in {".", ".."}
        or any(c in session_id for c in ":/\x00")
    ):
        msg = f"invalid session id {session_id!r}: one path component, no ':' or NUL"
        raise ArtifactRetentionError(msg)
    return session_id


def check_sha256(value: object, what: str = "content_sha256") -> str:
    """Return `value` if it is 64 lower-case hex digits."""
    if not isinstance(value, str) or not SHA256_HEX.match(value):
        msg = f"{what} must be 64 lower-case hex digits, not {shown(value)}"
        raise ArtifactRetentionError(msg)
    return value


@dataclass(frozen=True)
class ArtifactSourceId:
    """A parsed `artifact:<session>:<filename>:<12 hex>` source id (S2.3)."""

    session_id: str
    filename: str
    digest_prefix: str

    def __str__(self) -> str:
        """Render the canonical source id."""
        return f"artifact:{self.session_id}:{self.filename}:{self.digest_prefix}"

    def matches_digest(self, content_sha256: str) -> bool:
        """Say whether the full digest starts with this id's prefix."""
        return content_sha256.startswith(self.digest_prefix)

    @classmethod
    def for_artifact(
        cls, session_id: str, filename: str, content_sha256: str
    ) -> ArtifactSourceId:
        """Build the source id of a stored artifact."""
        check_session_id(session_id)
        check_sha256(content_sha256)
        return parse_artifact_source_id(
            f"artifact:{session_id}:{filename}:{content_sha256[:12]}"
        )


def parse_artifact_source_id(source_id: object) -> ArtifactSourceId:
    """Parse a source id strictly, raising `ArtifactRetentionError` otherwise."""
    if not isinstance(source_id, str):
        msg = f"source id must be a string, not {type(source_id).__name__}"
        raise ArtifactRetentionError(msg)
    match = _SOURCE_ID.match(source_id)
    if match is None:
        msg = f"malformed artifact source id {source_id!r}"
        raise ArtifactRetentionError(msg)
    session_id = check_session_id(match["session"])
    filename = match["filename"]
    if artifact_number(filename) is None:
        msg = f"source id names no artifact file: {filename!r} (must be path-free)"
        raise ArtifactRetentionError(msg)
    return ArtifactSourceId(session_id, filename, match["prefix"])


@dataclass(frozen=True)
class ArtifactSource:
    """Provenance of an artifact (S4.1)."""

    source_id: str
    title: str
    captured_at: str
    source_type: str = "artifact"

    def to_dict(self) -> dict[str, str]:
        """Return a JSON-ready mapping."""
        return {
            "source_id": self.source_id,
            "source_type": self.source_type,
            "title": self.title,
            "captured_at": self.captured_at,
        }


@dataclass(frozen=True)
class ArtifactMemoryReference:
    """What a memory system stores: no content, no preview (S4.1)."""

    summary: str
    artifact_path: str
    content_sha256: str
    source_tool: str
    source: ArtifactSource

    def to_dict(self) -> dict[str, Any]:
        """Return exactly the five fields SPEC names."""
        return {
            "summary": self.summary,
            "artifact_path": self.artifact_path,
            "content_sha256": self.content_sha256,
            "source_tool": self.source_tool,
            "source": self.source.to_dict(),
        }


@dataclass(frozen=True)
class ArtifactReference:
    """A stored artifact's handle, local path and provenance; never its content.

    `handle` is what models, memory systems and the CLI see (S4.1); `path`
    is where the local backend keeps the file (the seed's field), and is
    accepted wherever a handle is. Without a `handle`, the path is the handle.
    """

    path: Path
    summary: str
    source_tool: str
    source: ArtifactSource
    size_bytes: int
    content_sha256: str
    handle: str = ""

    def __post_init__(self) -> None:
        if not self.handle:
            object.__setattr__(self, "handle", str(self.path))

    def for_memory(self) -> ArtifactMemoryReference:
        """Return the reference a memory system keeps: the handle, no host path."""
        return ArtifactMemoryReference(
            summary=self.summary,
            artifact_path=self.handle,
            content_sha256=self.content_sha256,
            source_tool=self.source_tool,
            source=self.source,
        )


@dataclass(frozen=True)
class ArtifactRetentionClaim:
    """A path-free promise that an artifact is referenced (S4.2)."""

    source_id: str
    content_sha256: str
    reference_count: int = 1
    retain_until: datetime | str | None = None

    def __post_init__(self) -> None:
        """Validate strictly; `retain_until` is normalised to aware UTC."""
        parsed = parse_artifact_source_id(self.source_id)
        check_sha256(self.content_sha256)
        if not parsed.matches_digest(self.content_sha256):
            msg = "claim belongs to a different artifact: digest prefix mismatch"
            raise ArtifactRetentionError(msg)
        # Bounded: the count is written to the journal and to owners' databases.
        problem = integer_problem("reference_count", self.reference_count, 1, MAX_SIZE)
        if problem is not None:
            raise ArtifactRetentionError(problem)
        if self.retain_until is not None:
            until = parse_timestamp(self.retain_until, "retain_until")
            object.__setattr__(self, "retain_until", until)

    @property
    def parsed_source_id(self) -> ArtifactSourceId:
        """Return the typed source id."""
        return parse_artifact_source_id(self.source_id)

    @property
    def retain_until_time(self) -> datetime | None:
        """Return retain_until as an aware datetime (validated at construction)."""
        value = self.retain_until
        return None if value is None else parse_timestamp(value, "retain_until")

    def is_active(self, now: datetime) -> bool:
        """Say whether the claim still protects its artifact at `now`."""
        until = self.retain_until_time
        return until is None or parse_timestamp(now, "now") < until

    @classmethod
    def from_memory_reference(
        cls,
        reference: ArtifactMemoryReference,
        *,
        reference_count: int = 1,
        retain_until: datetime | str | None = None,
    ) -> ArtifactRetentionClaim:
        """Build the claim for a reference a memory system holds."""
        return cls(
            source_id=reference.source.source_id,
            content_sha256=reference.content_sha256,
            reference_count=reference_count,
            retain_until=retain_until,
        )

    def check_session(self, session_id: str) -> None:
        """Raise unless the claim names `session_id`."""
        if self.parsed_source_id.session_id != session_id:
            msg = "claim belongs to a different artifact session"
            raise ArtifactRetentionError(msg)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping with primitives only."""
        until = self.retain_until_time
        return {
            "source_id": self.source_id,
            "content_sha256": self.content_sha256,
            "reference_count": self.reference_count,
            "retain_until": None if until is None else until.isoformat(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArtifactRetentionClaim:
        """Rebuild a claim from `to_dict()` output."""
        return cls(
            source_id=data["source_id"],
            content_sha256=data["content_sha256"],
            reference_count=data["reference_count"],
            retain_until=data["retain_until"],
        )


@dataclass(frozen=True)
class ArtifactLeaseTransaction:
    """A prepared publication: its stable id, its claim and when it was prepared."""

    transaction_id: str
    claim: ArtifactRetentionClaim
    prepared_at: datetime

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping with primitives only."""
        return {
            "transaction_id": self.transaction_id,
            "claim": self.claim.to_dict(),
            "prepared_at": format_timestamp(self.prepared_at),
        }


@dataclass(frozen=True)
class ArtifactLeaseState:
    """A lease's transaction and the phases it went through, in order."""

    transaction: ArtifactLeaseTransaction
    phases: tuple[ArtifactLeasePhase, ...]

    @property
    def current_phase(self) -> ArtifactLeasePhase:
        """Return the latest phase."""
        return self.phases[-1]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping with primitives only."""
        return {
            "transaction": self.transaction.to_dict(),
            "phases": [phase.value for phase in self.phases],
        }


@dataclass(frozen=True)
class ArtifactLeaseRecovery:
    """What a session's leases protect after a restart, and every lease's phases."""

    session_id: str
    claims: tuple[ArtifactRetentionClaim, ...]
    pending_transaction_ids: tuple[str, ...]
    states: tuple[ArtifactLeaseState, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready mapping: claims and ids, never a path (S6.4)."""
        return {
            "session_id": self.session_id,
            "claims": [claim.to_dict() for claim in self.claims],
            "pending_transaction_ids": list(self.pending_transaction_ids),
            "states": [state.to_dict() for state in self.states],
        }


@dataclass(frozen=True)
class ArtifactReferenceObservation:
    """An owner's fenced answer for one transaction id (S5.1)."""

    transaction_id: str
    generation: int
    presence: ArtifactReferencePresence
    source_id: str | None = None
    content_sha256: str | None = None
    absence_sealed: bool = False

    def __post_init__(self) -> None:
        """Reject observations that contradict themselves."""
        if not self.transaction_id:
            msg = "observation needs a transaction id"
            raise ArtifactRetentionError(msg)
        if isinstance(self.generation, bool) or not isinstance(self.generation, int):
            msg = f"generation must be an integer, not {shown(self.generation)}"
            raise ArtifactRetentionError(msg)
        if self.generation < 0:
            msg = f"generation must be >= 0, not {shown(self.generation)}"
            raise ArtifactRetentionError(msg)
        presence = ArtifactReferencePresence(self.presence)
        object.__setattr__(self, "presence", presence)
        if self.absence_sealed and presence is not ArtifactReferencePresence.ABSENT:
            msg = f"a sealed absence cannot be {presence.value}"
            raise ArtifactRetentionError(msg)


@dataclass(frozen=True)
class ArtifactReconciliationReport:
    """The outcome for one transaction id; no path, content or secret (S5.5)."""

    transaction_id: str
    status: ArtifactReconciliationStatus
    reason: ArtifactReconciliationReason
    observed_generation: int | None = None

    def __post_init__(self) -> None:
        """Demand a reason code of the vocabulary (S5.5)."""
        object.__setattr__(self, "reason", ArtifactReconciliationReason(self.reason))

    def to_dict(self) -> dict[str, Any]:
        """Return exactly the four fields SPEC names."""
        return {
            "transaction_id": self.transaction_id,
            "status": self.status.value,
            "reason": self.reason.value,
            "observed_generation": self.observed_generation,
        }


MAX_ORPHAN_TTL_SECONDS: Final = timedelta.max.days * 86400
"""The longest TTL a `timedelta` holds (999999999 days)."""


@dataclass(frozen=True)
class ArtifactCleanupPolicy:
    """How GC treats unprotected artifacts (S6.1); a dry run by default."""

    orphan_ttl_seconds: float = DEFAULT_ORPHAN_TTL_SECONDS
    max_deletions: int | None = None
    dry_run: bool = True

    def __post_init__(self) -> None:
        """Reject a TTL, cap or flag that is not of its type and range, naming it."""
        # A NaN TTL compares false with every age: every file would be past it.
        problem = number_problem(
            "orphan_ttl_seconds", self.orphan_ttl_seconds, 0, MAX_ORPHAN_TTL_SECONDS
        )
        problems = [] if problem is None else [problem]
        cap = self.max_deletions
        if cap is not None and integer_problem("max_deletions", cap, 0, MAX_SIZE):
            problems.append(
                f"max_deletions must be None or an integer >= 0 (at most {MAX_SIZE}), "
                f"not {shown(cap)}"
            )
        if not isinstance(self.dry_run, bool):
            problems.append(f"dry_run must be True or False, not {shown(self.dry_run)}")
        if problems:
            raise ArtifactRetentionError("; ".join(problems))
