"""Garbage collection and recovery of a vault session's objects (S6, S2.6).

There is no quarantine directory to move an object into, and no rename. Plan:
list the session's objects, compare each with its event by HEAD (size, ETag,
and the SHA-256 checksum the server verified at upload), and decide as S6.1
does. Apply, per candidate under the session's advisory lock: fold the claims
again, HEAD again, record the intent (`quarantined`), delete `If-Match` the
recorded ETag, record the deletion. Any surprise keeps the object and reports
it. Recovery settles an intent a crash left: the object still there goes back
to its prior state (the next plan decides again); one already gone gets its
deletion recorded. Nothing is ever deleted without its intent recorded first.

An object with no event is adopted as an orphan only once it is older than
`ORPHAN_GRACE`: a writer on another host records its event right after its
upload completes, and that short window must not look like an orphan.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.storage.eventstore import retrying
from spillvault.adapters.storage.object_store import (
    STALE_UPLOAD_AGE,
    ObjectArtifactStore,
)
from spillvault.adapters.storage.s3_client import PreconditionFailedError, s3_client
from spillvault.domain.artifact import Artifact
from spillvault.domain.cleanup import (
    ApplyOutcome,
    ArtifactClaims,
    ArtifactCleanupDecision,
    ArtifactCleanupPlan,
    ArtifactCleanupReport,
    EntryFacts,
    EntryKind,
    FileSnapshot,
    cleanup_report,
    explain,
    limit_deletions,
    missing_decision,
)
from spillvault.domain.enums import ArtifactState
from spillvault.domain.errors import ArtifactIntegrityError, ArtifactLeaseJournalError
from spillvault.domain.machines import ARTIFACT_MACHINE
from spillvault.domain.timestamps import parse_timestamp
from spillvault.domain.values import artifact_number

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.adapters.storage.object_store import ListedObject
    from spillvault.domain.session_view import ArtifactRecord
    from spillvault.domain.values import ArtifactCleanupPolicy

ORPHAN_GRACE = timedelta(minutes=10)
"""How old an object with no event must be before GC adopts it as an orphan."""
_GONE_BY_GC = frozenset(
    ARTIFACT_MACHINE.state_after(trigger) for trigger in ("quarantine", "delete")
)


def vault_store(session: SessionHandles) -> ObjectArtifactStore:
    """Return a store on a vault session's objects."""
    if session.artifacts is None:  # pragma: no cover - callers dispatch on it
        msg = f"session {session.session_id} keeps its artifacts on disk"
        raise ValueError(msg)
    return ObjectArtifactStore(session, session.artifacts, s3_client())


# ------------------------------------------------------------------- plan


def plan_objects(
    session: SessionHandles,
    policy: ArtifactCleanupPolicy,
    at: datetime,
    claims: ArtifactClaims,
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupPlan:
    """Decide every object of the session and every artifact whose object is gone."""
    store = vault_store(session)
    records = session_projection(session).artifact_records()
    listed = store.list_objects()
    decisions = []
    for done, found in enumerate(listed, 1):
        decisions.append(_decide(session, store, records, claims, found, at, policy))
        if progress is not None:
            progress(done, len(listed))
    present = {found.name for found in listed}
    decisions = limit_deletions(decisions, policy.max_deletions)
    decisions += [
        missing_decision(
            name,
            reference_count=claims.counts.get(name, 0),
            protected=claims.protects(name),
            detail=f"the object is missing ({record.state.value})",
        )
        for name, record in records.items()
        if name not in present
        and record.state not in _GONE_BY_GC
        and record.state is not ArtifactState.OPEN
    ]
    return ArtifactCleanupPlan(
        session_id=session.session_id,
        planned_at=at,
        policy=policy,
        decisions=tuple(decisions),
    )


def _decide(  # noqa: PLR0913, PLR0917 - one object's whole context
    session: SessionHandles,
    store: ObjectArtifactStore,
    records: dict[str, ArtifactRecord],
    claims: ArtifactClaims,
    found: ListedObject,
    at: datetime,
    policy: ArtifactCleanupPolicy,
) -> ArtifactCleanupDecision:
    name = found.name
    facts = EntryFacts(name, EntryKind.REGULAR)
    if artifact_number(name) is not None:
        record = records.get(name)
        being_written = False
        digest: str | None = None
        if record is None and at - found.last_modified < ORPHAN_GRACE:
            being_written = True  # its writer may not have recorded it yet
        elif record is None:
            record, digest = _adopt(session, store, name, at)
        elif record.state is not ArtifactState.OPEN:
            digest = _digest_of(session, store, name, record)
        facts = EntryFacts(
            name,
            EntryKind.REGULAR,
            artifact_state=None if record is None else record.state,
            being_written=being_written,
            recorded_sha256=None if record is None else record.content_sha256,
            recorded_size=None if record is None else record.size_bytes,
            snapshot=None if digest is None else _snapshot(found, digest),
            claim_digests=claims.digests.get(name, ()),
            reference_count=claims.counts.get(name, 0),
            protected=claims.protects(name),
        )
    return explain(facts, now=at, orphan_ttl_seconds=policy.orphan_ttl_seconds)


def _digest_of(
    session: SessionHandles,
    store: ObjectArtifactStore,
    name: str,
    record: ArtifactRecord,
) -> str | None:
    """Return the object's SHA-256: the recorded one if HEAD agrees, else hashed."""
    artifact = session.store.get_artifact(name)
    content = None if artifact is None else artifact.stored_content
    if content is None:
        return None
    try:
        store.confirm(name, content)
    except FileNotFoundError:
        return None
    except ArtifactIntegrityError:
        # Not the recorded object: find out what it holds (rare, so a GET).
        try:
            hashed, _ = store.read_whole(name)
        except FileNotFoundError:
            return None
        return hashed.content_sha256
    return record.content_sha256


def _adopt(
    session: SessionHandles, store: ObjectArtifactStore, name: str, at: datetime
) -> tuple[ArtifactRecord | None, str | None]:
    """Record an old object with no event as an orphan (S6.1)."""
    try:
        content, facts = store.read_whole(name)
    except FileNotFoundError:
        return None, None

    def attempt() -> None:
        if session.store.get_artifact(name) is None:
            adopted = Artifact.adopt(name, content, adopted_at=at, stored_object=facts)
            session.store.save_aggregates(adopted)

    with session.lock:
        retrying(attempt)
    record = session_projection(session).artifact_records().get(name)
    return record, content.content_sha256


def _snapshot(found: ListedObject, digest: str) -> FileSnapshot:
    modified = found.last_modified
    return FileSnapshot(
        size_bytes=found.size,
        mtime_ns=int(modified.timestamp() * 1_000_000_000),
        st_dev=0,
        st_ino=0,
        content_sha256=digest,
    )


# ------------------------------------------------------------------ apply


def apply_objects(
    session: SessionHandles,
    plan: ArtifactCleanupPlan,
    applied_at: datetime,
    protecting: Callable[[datetime], ArtifactClaims],
    progress: Callable[[int, int], None] | None = None,
) -> ArtifactCleanupReport:
    """Delete the candidates whose objects are still exactly as recorded."""
    if plan.dry_run:
        return cleanup_report(plan, (), applied_at=applied_at)
    store = vault_store(session)
    candidates = plan.candidates()
    outcomes: list[ArtifactCleanupDecision] = []
    error: str | None = None
    for done, candidate in enumerate(candidates, 1):
        try:
            with session.lock:
                outcomes.append(
                    _apply_one(session, store, candidate, applied_at, protecting)
                )
        except OSError as failure:
            error = f"{candidate.filename}: {failure}"
            break
        if progress is not None:
            progress(done, len(candidates))
    return cleanup_report(plan, outcomes, applied_at=applied_at, error=error)


def _apply_one(  # noqa: PLR0911 - one return per S6.2 outcome
    session: SessionHandles,
    store: ObjectArtifactStore,
    planned: ArtifactCleanupDecision,
    at: datetime,
    protecting: Callable[[datetime], ArtifactClaims],
) -> ArtifactCleanupDecision:
    name, snapshot = planned.filename, planned.snapshot
    claims = protecting(at)
    count = claims.counts.get(name, 0)
    if artifact_number(name) is None:
        return ApplyOutcome.NAME_NOT_OWNED.decide(planned, count)
    if claims.protects(name) and session.safeguards.reverify_claims_at_apply:
        return ApplyOutcome.CLAIM_ADDED.decide(planned, count)
    artifact = session.store.get_artifact(name)
    if (
        snapshot is None
        or artifact is None
        or not ARTIFACT_MACHINE.allows(artifact.state, "quarantine")
    ):
        return ApplyOutcome.STATE_CHANGED.decide(planned, count)
    recorded = artifact.object_facts
    try:
        head = store.head(name)
    except FileNotFoundError:
        artifact.mark_lost(detected_at=at)
        session.store.save_aggregates(artifact)
        return ApplyOutcome.ALREADY_GONE.decide(planned, count)
    if (
        recorded is None
        or (head["etag"], head["checksum"]) != (recorded.etag, recorded.checksum_sha256)
        or head["size"] != snapshot.size_bytes
    ):
        return ApplyOutcome.FILE_CHANGED.decide(planned, count)
    artifact.quarantine(uuid.uuid4().hex, quarantined_at=at)
    session.store.save_aggregates(artifact)  # the intent, before any delete
    try:
        store.delete_if_match(name, recorded.etag)
    except PreconditionFailedError:
        return _settle_one(session, store, artifact, at, planned, count)
    artifact.delete(deleted_at=at)
    session.store.save_aggregates(artifact)
    return ApplyOutcome.DELETED.decide(planned, count)


def _settle_one(  # noqa: PLR0913, PLR0917 - one candidate's whole state
    session: SessionHandles,
    store: ObjectArtifactStore,
    artifact: Artifact,
    at: datetime,
    planned: ArtifactCleanupDecision,
    count: int,
) -> ArtifactCleanupDecision:
    """Settle a refused conditional delete: the object changed, or is gone."""
    if _settle(session, store, artifact, at) is ArtifactState.DELETED:
        return ApplyOutcome.DELETED.decide(planned, count)
    return ApplyOutcome.PUT_BACK.decide(planned, count)


def _settle(
    session: SessionHandles,
    store: ObjectArtifactStore,
    artifact: Artifact,
    at: datetime,
) -> ArtifactState:
    """Finish an intent from the object's presence: restore it, or record the delete."""
    try:
        store.head(artifact.filename)
    except FileNotFoundError:
        artifact.delete(deleted_at=at)
    else:
        artifact.restore(restored_at=at)
    session.store.save_aggregates(artifact)
    return artifact.artifact_state


# --------------------------------------------------------------- recovery


@dataclass
class ObjectRecovery:
    """What one recovery pass over a vault session did, by filename."""

    quarantine_resolved: list[str] = field(default_factory=list)
    live_open: list[str] = field(default_factory=list)
    marked_lost: list[str] = field(default_factory=list)
    aborted_uploads: list[str] = field(default_factory=list)


def recover_objects(session: SessionHandles) -> ObjectRecovery:
    """Settle intents, give up streams whose writer is long gone, abort old uploads."""
    store = vault_store(session)
    at = session.clock.now()
    report = ObjectRecovery()
    with session.lock:
        records = session_projection(session).artifact_records()
        for name, record in sorted(records.items()):
            if record.state is ArtifactState.QUARANTINED:
                _recover_intent(session, store, name, at)
                report.quarantine_resolved.append(name)
            elif record.state is ArtifactState.OPEN:
                _recover_open(session, name, at, report)
        report.aborted_uploads.extend(store.abort_stale_uploads(at))
    return report


def _recover_intent(
    session: SessionHandles, store: ObjectArtifactStore, name: str, at: datetime
) -> None:
    artifact = session.store.get_artifact(name)
    if artifact is not None and artifact.artifact_state is ArtifactState.QUARANTINED:
        _settle(session, store, artifact, at)


def _recover_open(
    session: SessionHandles, name: str, at: datetime, report: ObjectRecovery
) -> None:
    """Record lost a stream whose writer is long gone (its bytes were in its spool)."""
    artifact = session.store.get_artifact(name)
    if artifact is None:  # pragma: no cover - the record says it exists
        return
    opened = parse_timestamp(artifact.created_at, "created_at")
    if at - opened < STALE_UPLOAD_AGE:
        report.live_open.append(name)
        return
    try:
        artifact.mark_lost(detected_at=at)
        session.store.save_aggregates(artifact)
    except ArtifactLeaseJournalError:
        return  # sealed meanwhile by its writer
    report.marked_lost.append(name)


__all__ = [
    "ORPHAN_GRACE",
    "ObjectRecovery",
    "apply_objects",
    "plan_objects",
    "recover_objects",
    "vault_store",
]
