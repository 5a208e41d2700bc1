"""The event-sourced Artifact aggregate (S2.3-S2.6, S6.1, S6.2, S8)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid5

from eventsourcing.domain import AggregateCreated, AggregateEvent, BaseAggregate

from .command import CommandFacts
from .constants import CHUNK_SIZE
from .enums import ArtifactState
from .errors import ArtifactIntegrityError
from .machines import ARTIFACT_MACHINE
from .timestamps import format_timestamp
from .values import ArtifactSourceId, artifact_number, check_sha256

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

_HEX = re.compile("[0-9a-f]*")
_ARTIFACT_IDS = UUID("0b6e2f7d-93c4-4c1e-8f55-2a7d4e9b1c30")


@dataclass(frozen=True)
class ArtifactContent:
    """What hashing the bytes found: digest, size, lines, per-chunk facts (S2.5)."""

    content_sha256: str
    size_bytes: int
    line_count: int
    chunk_sha256: tuple[str, ...]
    chunk_newlines: tuple[int, ...]

    def __post_init__(self) -> None:
        """Reject facts that cannot describe one byte string."""
        check_sha256(self.content_sha256)
        chunks = -(-self.size_bytes // CHUNK_SIZE) if self.size_bytes >= 0 else -1
        problems = []
        if chunks < 0:
            problems.append(f"size_bytes {self.size_bytes} < 0")
        if len(self.chunk_sha256) != chunks or len(self.chunk_newlines) != chunks:
            problems.append(f"{chunks} chunks expected for {self.size_bytes} bytes")
        newlines = sum(self.chunk_newlines)
        if not newlines <= self.line_count <= newlines + 1:
            problems.append(f"line_count {self.line_count} vs {newlines} newlines")
        if problems:
            msg = "inconsistent artifact content: " + "; ".join(problems)
            raise ArtifactIntegrityError(msg)
        # One scan for all of them: a page read builds this for every open.
        digests = self.chunk_sha256
        shaped = all(isinstance(d, str) and len(d) == 64 for d in digests)
        if not shaped or not _HEX.fullmatch("".join(digests)):
            for digest in digests:  # name the first bad one
                check_sha256(digest, "chunk digest")

    def to_payload(self) -> dict[str, Any]:
        """Return the event fields (primitives only)."""
        return {
            "content_sha256": self.content_sha256,
            "size_bytes": self.size_bytes,
            "line_count": self.line_count,
            "chunk_sha256": list(self.chunk_sha256),
            "chunk_newlines": list(self.chunk_newlines),
        }


@dataclass(frozen=True)
class StoredObject:
    """What an object store said of an artifact's object when it was written.

    `etag` and `checksum_sha256` are the server's own strings (a multipart
    object's checksum is the SHA-256 of its parts' digests, suffixed `-N`):
    GC compares them on a HEAD before it deletes (S6.2).
    """

    etag: str
    checksum_sha256: str
    parts: int

    def __post_init__(self) -> None:
        """Reject facts no object store reports."""
        if not self.etag or not self.checksum_sha256 or self.parts < 1:
            msg = f"incomplete object facts: {self!r}"
            raise ArtifactIntegrityError(msg)

    def to_payload(self) -> dict[str, Any]:
        """Return the event field (primitives only)."""
        return {
            "etag": self.etag,
            "checksum_sha256": self.checksum_sha256,
            "parts": self.parts,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> StoredObject:
        """Rebuild the facts from an event field."""
        return cls(
            etag=str(payload["etag"]),
            checksum_sha256=str(payload["checksum_sha256"]),
            parts=int(payload["parts"]),
        )


class Artifact(BaseAggregate[UUID]):
    """One stored tool result; its id derives from its (never reused) filename."""

    TOPIC = "spillvault:Artifact"

    if TYPE_CHECKING:  # annotations here would become __init__ parameters
        filename: str
        state: str
        prior_state: str | None
        source_tool: str
        tool_use_id: str | None
        is_error: bool
        created_at: str
        summary: str | None
        content: dict[str, Any] | None
        quarantine_intent: str | None
        ended_at: str | None
        command: dict[str, Any] | None
        stored_object: dict[str, Any] | None

    class Event(AggregateEvent):
        """Base of the artifact's own events."""

        TOPIC = "spillvault:Artifact.Event"

    class Stored(AggregateCreated):
        """A whole output was stored and published (A3)."""

        TOPIC = "spillvault:Artifact.Stored"
        STATE = ArtifactState.SEALED.value
        filename: str
        source_tool: str
        tool_use_id: str | None
        is_error: bool
        captured_at: str
        summary: str
        content: dict[str, Any]
        # Defaulted: events recorded before commands were kept load without it.
        command: dict[str, Any] | None = None
        # Defaulted: only an object store records its object's facts.
        stored_object: dict[str, Any] | None = None

        def apply(self, aggregate: Any) -> None:
            """Assign a sealed artifact."""
            aggregate.begin(self.filename, self.STATE, self.captured_at)
            aggregate.source_tool = self.source_tool
            aggregate.tool_use_id = self.tool_use_id
            aggregate.is_error = self.is_error
            aggregate.summary = self.summary
            aggregate.content = dict(self.content)
            aggregate.command = None if self.command is None else dict(self.command)
            aggregate.stored_object = _copy(self.stored_object)

    class StreamOpened(AggregateCreated):
        """A streaming artifact was created under its final name (S2.4)."""

        TOPIC = "spillvault:Artifact.StreamOpened"
        STATE = ArtifactState.OPEN.value
        filename: str
        source_tool: str
        tool_use_id: str | None
        opened_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign an open artifact."""
            aggregate.begin(self.filename, self.STATE, self.opened_at)
            aggregate.source_tool = self.source_tool
            aggregate.tool_use_id = self.tool_use_id

    class Adopted(AggregateCreated):
        """GC found an artifact-named file with no event (S6.1)."""

        TOPIC = "spillvault:Artifact.Adopted"
        STATE = ArtifactState.ORPHAN.value
        filename: str
        adopted_at: str
        content: dict[str, Any]
        # Defaulted: only an object store records its object's facts.
        stored_object: dict[str, Any] | None = None

        def apply(self, aggregate: Any) -> None:
            """Assign an orphan artifact."""
            aggregate.begin(self.filename, self.STATE, self.adopted_at)
            aggregate.content = dict(self.content)
            aggregate.stored_object = _copy(self.stored_object)

    class Sealed(Event):
        """A stream finished (`sealed`) or stopped early (`partial`)."""

        TOPIC = "spillvault:Artifact.Sealed"
        state: str
        summary: str
        content: dict[str, Any]
        sealed_at: str
        # Defaulted: events recorded before commands were kept load without it.
        command: dict[str, Any] | None = None
        # Defaulted: only an object store records its object's facts.
        stored_object: dict[str, Any] | None = None

        def apply(self, aggregate: Any) -> None:
            """Assign the sealed content."""
            aggregate.state = self.state
            aggregate.summary = self.summary
            aggregate.content = dict(self.content)
            aggregate.command = None if self.command is None else dict(self.command)
            aggregate.stored_object = _copy(self.stored_object)

    class Quarantined(Event):
        """GC moved the file aside under an intent, remembering the prior state."""

        TOPIC = "spillvault:Artifact.Quarantined"
        TRIGGER = "quarantine"
        intent_id: str
        prior_state: str
        quarantined_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the state `quarantine` leads to, remembering the prior one."""
            aggregate.prior_state = self.prior_state
            aggregate.quarantine_intent = self.intent_id
            aggregate.state = ARTIFACT_MACHINE.state_after(self.TRIGGER)

    class Restored(Event):
        """GC put the file back; the artifact returns to its prior state."""

        TOPIC = "spillvault:Artifact.Restored"
        state: str
        restored_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the restored state."""
            aggregate.state = self.state
            aggregate.prior_state = None
            aggregate.quarantine_intent = None

    class Deleted(Event):
        """GC verified and unlinked the file."""

        TOPIC = "spillvault:Artifact.Deleted"
        TRIGGER = "delete"
        deleted_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the state `delete` leads to."""
            aggregate.state = ARTIFACT_MACHINE.state_after(self.TRIGGER)
            aggregate.ended_at = self.deleted_at

    class MarkedLost(Event):
        """Recovery found the file gone without a deletion."""

        TOPIC = "spillvault:Artifact.MarkedLost"
        TRIGGER = "mark_lost"
        detected_at: str

        def apply(self, aggregate: Any) -> None:
            """Assign the state `mark_lost` leads to."""
            aggregate.state = ARTIFACT_MACHINE.state_after(self.TRIGGER)
            aggregate.ended_at = self.detected_at

    @staticmethod
    def create_id(filename: str) -> UUID:
        """Derive the artifact id from its (never reused) filename."""
        return uuid5(_ARTIFACT_IDS, filename)

    @classmethod
    def store(  # noqa: PLR0913 - the fields S2.3 names
        cls,
        filename: str,
        content: ArtifactContent,
        *,
        source_tool: str,
        tool_use_id: str | None,
        is_error: bool,
        captured_at: datetime,
        summary: str,
        command: CommandFacts | None = None,
        stored_object: StoredObject | None = None,
    ) -> Artifact:
        """Record a whole output stored under `filename` (a command's, if given)."""
        return cls._begin_with(
            cls.Stored,
            cls.Stored.STATE,
            filename,
            source_tool=source_tool,
            tool_use_id=tool_use_id,
            is_error=is_error,
            captured_at=format_timestamp(captured_at),
            summary=summary,
            content=content.to_payload(),
            command=None if command is None else command.to_payload(),
            stored_object=_payload(stored_object),
        )

    @classmethod
    def open_stream(
        cls,
        filename: str,
        *,
        source_tool: str,
        tool_use_id: str | None,
        opened_at: datetime,
    ) -> Artifact:
        """Record a stream created under its final name."""
        return cls._begin_with(
            cls.StreamOpened,
            cls.StreamOpened.STATE,
            filename,
            source_tool=source_tool,
            tool_use_id=tool_use_id,
            opened_at=format_timestamp(opened_at),
        )

    @classmethod
    def adopt(
        cls,
        filename: str,
        content: ArtifactContent,
        *,
        adopted_at: datetime,
        stored_object: StoredObject | None = None,
    ) -> Artifact:
        """Record a file (or object) found with no event, as an orphan."""
        return cls._begin_with(
            cls.Adopted,
            cls.Adopted.STATE,
            filename,
            adopted_at=format_timestamp(adopted_at),
            content=content.to_payload(),
            stored_object=_payload(stored_object),
        )

    @classmethod
    def _begin_with(
        cls,
        event_class: type[AggregateCreated],
        state: str,
        filename: str,
        **fields: Any,
    ) -> Artifact:
        ARTIFACT_MACHINE.check_creation(state)
        if artifact_number(filename) is None:
            msg = f"not an artifact filename: {filename!r}"
            raise ValueError(msg)
        return cls._create(
            event_class, id=cls.create_id(filename), filename=filename, **fields
        )

    def seal(
        self,
        content: ArtifactContent,
        *,
        summary: str,
        sealed_at: datetime,
        command: CommandFacts | None = None,
        stored_object: StoredObject | None = None,
    ) -> None:
        """Record a stream that finished whole (a command's, if given)."""
        self._seal("seal", content, summary, sealed_at, command, stored_object)

    def seal_partial(
        self,
        content: ArtifactContent,
        *,
        summary: str,
        sealed_at: datetime,
        command: CommandFacts | None = None,
        stored_object: StoredObject | None = None,
    ) -> None:
        """Record a stream that stopped early; its bytes are kept as `partial`."""
        self._seal("seal_partial", content, summary, sealed_at, command, stored_object)

    def _seal(  # noqa: PLR0913, PLR0917 - the fields of one Sealed event
        self,
        trigger: str,
        content: ArtifactContent,
        summary: str,
        at: datetime,
        command: CommandFacts | None,
        stored_object: StoredObject | None,
    ) -> None:
        dest = ARTIFACT_MACHINE.decide(self.state, trigger)
        self.trigger_event(
            self.Sealed,
            state=dest,
            summary=summary,
            content=content.to_payload(),
            sealed_at=format_timestamp(at),
            command=None if command is None else command.to_payload(),
            stored_object=_payload(stored_object),
        )

    def quarantine(self, intent_id: str, *, quarantined_at: datetime) -> None:
        """Record GC's intent to move the file aside (S6.2)."""
        ARTIFACT_MACHINE.decide(self.state, self.Quarantined.TRIGGER)
        self.trigger_event(
            self.Quarantined,
            intent_id=intent_id,
            prior_state=self.state,
            quarantined_at=format_timestamp(quarantined_at),
        )

    def restore(self, *, restored_at: datetime) -> None:
        """Record that the file went back; returns to the remembered state."""
        dest = ARTIFACT_MACHINE.decide(self.state, "restore", prior=self.prior_state)
        self.trigger_event(
            self.Restored, state=dest, restored_at=format_timestamp(restored_at)
        )

    def delete(self, *, deleted_at: datetime) -> None:
        """Record the verified unlink."""
        ARTIFACT_MACHINE.decide(self.state, self.Deleted.TRIGGER)
        self.trigger_event(self.Deleted, deleted_at=format_timestamp(deleted_at))

    def mark_lost(self, *, detected_at: datetime) -> None:
        """Record that the file vanished without a deletion."""
        ARTIFACT_MACHINE.decide(self.state, self.MarkedLost.TRIGGER)
        self.trigger_event(self.MarkedLost, detected_at=format_timestamp(detected_at))

    def begin(self, filename: str, state: str, at: str) -> None:
        """Assign the fields every creation sets; called only from event bodies."""
        self.filename = filename
        self.state = state
        self.prior_state = None
        self.source_tool = ""
        self.tool_use_id = None
        self.is_error = False
        self.created_at = at
        self.summary = None
        self.content = None
        self.quarantine_intent = None
        self.ended_at = None
        self.command = None
        self.stored_object = None

    @property
    def artifact_state(self) -> ArtifactState:
        """Return the current state."""
        return ArtifactState(self.state)

    @property
    def number(self) -> int:
        """Return the artifact's number."""
        number = artifact_number(self.filename)
        assert number is not None  # noqa: S101 - checked at creation
        return number

    @property
    def stored_content(self) -> ArtifactContent | None:
        """Return the hashed facts, once known."""
        if self.content is None:
            return None
        data = self.content
        return ArtifactContent(
            content_sha256=data["content_sha256"],
            size_bytes=data["size_bytes"],
            line_count=data["line_count"],
            chunk_sha256=tuple(data["chunk_sha256"]),
            chunk_newlines=tuple(data["chunk_newlines"]),
        )

    @property
    def command_facts(self) -> CommandFacts | None:
        """Return what the command that produced the output did, when one did."""
        return None if self.command is None else CommandFacts.from_payload(self.command)

    @property
    def object_facts(self) -> StoredObject | None:
        """Return what the object store said of the object, when one holds it."""
        if self.stored_object is None:
            return None
        return StoredObject.from_payload(self.stored_object)

    def source_id(self, session_id: str) -> str | None:
        """Return the source id in `session_id`, once the digest is known (S2.3)."""
        content = self.stored_content
        if content is None:
            return None
        return str(
            ArtifactSourceId.for_artifact(
                session_id, self.filename, content.content_sha256
            )
        )


def _payload(stored_object: StoredObject | None) -> dict[str, Any] | None:
    return None if stored_object is None else stored_object.to_payload()


def _copy(payload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if payload is None else dict(payload)


_CREATIONS = (Artifact.Stored, Artifact.StreamOpened, Artifact.Adopted)
_MOVES = (Artifact.Quarantined, Artifact.Deleted, Artifact.MarkedLost)

ARTIFACT_CREATED_TOPICS = frozenset(event.TOPIC for event in _CREATIONS)
"""The topics of the events that create an artifact."""

ARTIFACT_STATE_AFTER: Mapping[str, str] = MappingProxyType(
    {event.TOPIC: event.STATE for event in _CREATIONS}
    | {event.TOPIC: ARTIFACT_MACHINE.state_after(event.TRIGGER) for event in _MOVES}
)
"""The state each artifact event leads to; Sealed and Restored carry theirs."""
