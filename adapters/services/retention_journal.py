"""`SessionRetentionJournal`: leases, publication, removal, reconciliation (S4, S5).

The event store is the authority (S4.4); `retention-leases.jsonl` is its
hash-chained projection, written before any owner call that depends on the
event (S4.5). Publication re-verifies the artifact and records PREPARED
under the session lock, releases the lock, calls the publisher, then records
COMMITTED (S4.6). Reconciliation decides from an owner's fenced observation,
tombstone before ABORTED (S5.2, S5.3). Lock order: owner fence, then the
session lock; neither is held across a publisher or remover call.
"""

from __future__ import annotations

import os
import uuid
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Self, TypeVar

from spillvault.adapters.services.lease_projection import (
    JournalReport,
    session_projection,
)
from spillvault.adapters.storage.artifact_store import (
    LocalArtifactStore,
    open_artifact_file,
)
from spillvault.adapters.storage.content_writer import digest_open_file
from spillvault.domain.bounds import number_problem, shown
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import (
    ArtifactLeasePhase,
    ArtifactReconciliationStatus,
    ArtifactReferencePresence,
)
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactMissingError,
    ArtifactOwnerGenerationChanged,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.machines import ARTIFACT_MACHINE, LEASE_MACHINE
from spillvault.domain.session_view import aggregate_claims
from spillvault.domain.timestamps import parse_timestamp
from spillvault.domain.values import (
    ArtifactLeaseRecovery,
    ArtifactLeaseState,
    ArtifactLeaseTransaction,
    ArtifactReconciliationReport,
    ArtifactReferenceObservation,
    ArtifactRetentionClaim,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.lease import Lease
    from spillvault.domain.ports import ArtifactReferenceFence, ArtifactReferenceOwner

T = TypeVar("T")
Status = ArtifactReconciliationStatus
_PUBLISHABLE = ARTIFACT_MACHINE.tagged("publishable")
_GONE = ARTIFACT_MACHINE.terminal_states  # deleted by GC, or found lost: no bytes
# How a lease found past its creation phase (decided by another) is reported.
_ALREADY = {
    phase: Status(f"already_{phase}")
    for phase in ArtifactLeasePhase
    if phase not in LEASE_MACHINE.creation_states
}
# What an operator may decide for a pending lease: where one transition takes it.
_DECISIONS = LEASE_MACHINE.next_states(ArtifactLeasePhase.PREPARED)
_RELEASABLE = " or ".join(sorted(LEASE_MACHINE.sources_of("release")))


class SessionRetentionJournal:
    """A session's retention leases and their journal (seed-compatible API)."""

    def __init__(self, session: SessionHandles, *, owns_session: bool = False) -> None:
        self._owns_session = owns_session
        self.session = session
        try:
            self._projection = session_projection(self.session)
        except BaseException:
            if self._owns_session:
                self.session.close()
            raise

    @property
    def path(self) -> str:
        """The journal file's path."""
        return os.path.join(self.session.path, RETENTION_JOURNAL_NAME)

    @property
    def session_id(self) -> str:
        """The session's id."""
        return self.session.session_id

    def close(self) -> None:
        """Save the lease view; close the session if this journal opened it."""
        self._projection.save()
        if self._owns_session:
            self.session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _checkpoint(self, name: str) -> None:
        """Mark a durable step (crash tests patch this to raise)."""

    # ------------------------------------------------------------- primitives

    def prepare(
        self,
        claim: ArtifactRetentionClaim,
        *,
        transaction_id: str | None = None,
        prepared_at: datetime | None = None,
    ) -> ArtifactLeaseTransaction:
        """Re-verify the artifact and record PREPARED, store then journal (S4.6)."""
        if not isinstance(claim, ArtifactRetentionClaim):
            msg = f"claim must be an ArtifactRetentionClaim, not {type(claim).__name__}"
            raise TypeError(msg)
        claim.check_session(self.session_id)
        transaction = ArtifactLeaseTransaction(
            transaction_id=_check_transaction_id(transaction_id),
            claim=claim,
            prepared_at=self._time(prepared_at, "prepared_at"),
        )
        lock = self.session.lock if self.session.safeguards.publication_lock else None
        with lock or nullcontext():
            if self.session.store.find_lease(transaction.transaction_id) is not None:
                msg = f"transaction id already used: {transaction.transaction_id!r}"
                raise ArtifactLeaseJournalError(msg)
            self._verify_artifact(claim)
            self.session.store.prepare_lease(transaction)
            self._projection.sync()
        self._checkpoint("after_prepared")
        return transaction

    def commit(
        self, transaction_id: str, *, committed_at: datetime | None = None
    ) -> ArtifactLeaseState:
        """Record COMMITTED: the owner holds the reference."""
        store = self.session.store
        return self._transition(
            store.commit_lease, transaction_id, committed_at, "commit"
        )

    def release(
        self, transaction_id: str, *, released_at: datetime | None = None
    ) -> ArtifactLeaseState:
        """Record RELEASED: the owner deleted the reference."""
        store = self.session.store
        return self._transition(
            store.release_lease, transaction_id, released_at, "release"
        )

    def abort(
        self, transaction_id: str, *, aborted_at: datetime | None = None
    ) -> ArtifactLeaseState:
        """Record ABORTED: the publication is void and can never land."""
        store = self.session.store
        return self._transition(store.abort_lease, transaction_id, aborted_at, "abort")

    # ------------------------------------------------------------------ flows

    def publish_reference(
        self,
        claim: ArtifactRetentionClaim,
        publisher: Callable[[], T],
        *,
        transaction_id: str | None = None,
        prepared_at: datetime | None = None,
        committed_at: datetime | None = None,
    ) -> tuple[ArtifactLeaseTransaction, T]:
        """Prepare, publish outside the lock, commit; only a rejection aborts (S4.6)."""
        transaction = self.prepare(
            claim, transaction_id=transaction_id, prepared_at=prepared_at
        )
        transaction_id = transaction.transaction_id
        try:
            value = publisher()
        except ArtifactPublicationRejected:
            self._unless_decided(
                transaction_id,
                lambda: self.abort(transaction_id),
                "abort",
            )
            raise
        self._unless_decided(
            transaction_id,
            lambda: self.commit(transaction_id, committed_at=committed_at),
            "commit",
        )
        return transaction, value

    def remove_reference(
        self,
        transaction_id: str,
        remover: Callable[[], object],
        *,
        released_at: datetime | None = None,
    ) -> ArtifactLeaseState:
        """Let the owner delete first; only then record RELEASED (S4.9)."""
        lease = self.session.store.get_lease(transaction_id)
        if not LEASE_MACHINE.allows(lease.phase, "release"):
            msg = (
                f"cannot remove {transaction_id!r}: the lease is "
                f"{lease.phase.value}, not {_RELEASABLE}"
            )
            raise ArtifactLeaseJournalError(msg)
        remover()
        return self._unless_decided(
            transaction_id,
            lambda: self.release(transaction_id, released_at=released_at),
            "release",
        )

    def _unless_decided(
        self,
        transaction_id: str,
        record: Callable[[], ArtifactLeaseState],
        trigger: str,
    ) -> ArtifactLeaseState:
        """Record a flow's own event, unless a reconciler recorded it first (S5.4)."""
        # No lock is held across the publisher or remover: a reconciler can see
        # the owner's new state and record the same outcome before the flow,
        # and the lease may have moved on from that outcome since.
        try:
            return record()
        except _AlreadyDecided as decided:
            outcome = LEASE_MACHINE.state_after(trigger)
            if decided.phase not in LEASE_MACHINE.reachable_from(outcome):
                raise
        return self.session.store.get_lease(transaction_id).lease_state

    # ---------------------------------------------------------------- journal

    def sync(self) -> None:
        """Verify the journal from its checkpoint and catch up a short one (S4.5)."""
        self._projection.sync()

    def verify(self) -> JournalReport:
        """Verify the whole journal against the store (J5); catch up a short one."""
        return self._projection.verify_whole()

    def repair(self) -> tuple[JournalReport, str]:
        """Rebuild the journal from the store, keeping the old file aside (J7)."""
        stamp = self.session.clock.now().strftime("%Y%m%dT%H%M%S%fZ")
        suffix = f"damaged-{stamp}"
        report = self._projection.rebuild(suffix=suffix)
        return report, f"{RETENTION_JOURNAL_NAME}.{suffix}"

    # -------------------------------------------------------------- recovery

    def recover(self, *, now: datetime | None = None) -> ArtifactLeaseRecovery:
        """Return what the live leases protect at `now` (prepared: no expiry, S4.7)."""
        at = self._time(now, "now")
        live = self._projection.live_leases()
        pending = sorted(
            tx
            for tx, lease in live.items()
            if lease.phase is ArtifactLeasePhase.PREPARED
        )
        states = tuple(
            ArtifactLeaseState(
                transaction=ArtifactLeaseTransaction(
                    lease.transaction_id, lease.claim, lease.prepared_at
                ),
                phases=_phases_to(lease.phase),
            )
            for lease in sorted(live.values(), key=lambda lease: lease.transaction_id)
        )
        return ArtifactLeaseRecovery(
            session_id=self.session_id,
            claims=aggregate_claims(live.values(), at),
            pending_transaction_ids=tuple(pending),
            states=states,
        )

    def current_claims(
        self, *, now: datetime | None = None
    ) -> tuple[ArtifactRetentionClaim, ...]:
        """Return the aggregated claims that protect artifacts at `now`."""
        return self.recover(now=now).claims

    @property
    def pending_transaction_ids(self) -> tuple[str, ...]:
        """The PREPARED transactions awaiting reconciliation."""
        return self.recover().pending_transaction_ids

    # --------------------------------------------------------- reconciliation

    def reconcile_reference(
        self,
        transaction_id: str,
        owner: ArtifactReferenceOwner,
        *,
        resolved_at: datetime | None = None,
    ) -> ArtifactReconciliationReport:
        """Reconcile one PREPARED lease with its owner (S5.2)."""
        lease = self.session.store.get_lease(transaction_id)
        return self._reconcile_prepared(lease, owner, resolved_at)

    def reconcile_pending(
        self,
        owner: ArtifactReferenceOwner,
        *,
        resolved_at: datetime | None = None,
        min_age: timedelta | float = 0,
    ) -> list[ArtifactReconciliationReport]:
        """Reconcile the PREPARED leases seen now, oldest first; skip young ones."""
        at = self._time(resolved_at, "resolved_at")
        youngest = at - _as_timedelta(min_age)
        pending = sorted(
            (
                lease
                for lease in self._projection.live_leases().values()
                if lease.phase is ArtifactLeasePhase.PREPARED
            ),
            key=lambda lease: (lease.prepared_at, lease.transaction_id),
        )
        reports = []
        for live in pending:
            if live.prepared_at > youngest:
                reports.append(
                    _report(
                        live.transaction_id,
                        Status.SKIPPED_YOUNG,
                        "younger_than_min_age",
                    )
                )
                continue
            lease = self.session.store.get_lease(live.transaction_id)
            reports.append(self._reconcile_prepared(lease, owner, at))
        return reports

    def reconcile_releases(
        self, owner: ArtifactReferenceOwner, *, resolved_at: datetime | None = None
    ) -> list[ArtifactReconciliationReport]:
        """Release COMMITTED leases whose owner no longer holds the reference (S5.2)."""
        at = self._time(resolved_at, "resolved_at")
        releasable = sorted(
            tx
            for tx, lease in self._projection.live_leases().items()
            if LEASE_MACHINE.allows(lease.phase, "release")
        )
        return [
            self._reconcile_release(self.session.store.get_lease(tx), owner, at)
            for tx in releasable
        ]

    def resolve(
        self,
        transaction_id: str,
        owner: ArtifactReferenceOwner,
        *,
        decision: ArtifactLeasePhase,
        reason: str,
        resolved_at: datetime | None = None,
    ) -> ArtifactReconciliationReport:
        """Apply an operator's decision to a PREPARED lease via the fence (S5.2)."""
        if decision not in _DECISIONS:
            msg = f"decision must be {' or '.join(_DECISIONS)}, not {decision}"
            raise ValueError(msg)
        if not reason.strip():
            msg = "an operator's resolution needs a reason"
            raise ValueError(msg)
        at = self._time(resolved_at, "resolved_at")
        lease = self.session.store.get_lease(transaction_id)
        with owner.inspect_fenced(lease.transaction) as fence:
            observation = fence.observation
            lease = self.session.store.get_lease(transaction_id)
            if lease.phase is not ArtifactLeasePhase.PREPARED:
                return _report(
                    transaction_id, _ALREADY[lease.phase], "not_pending", observation
                )
            if decision is ArtifactLeasePhase.COMMITTED:
                if not _matches(observation, lease.claim):
                    msg = (
                        f"cannot commit {transaction_id!r}: the owner does not hold "
                        f"the reference ({observation.presence.value})"
                    )
                    raise ArtifactLeaseJournalError(msg)
                return self._finish(
                    lambda: self.commit(transaction_id, committed_at=at),
                    _report(
                        transaction_id, Status.COMMITTED, "operator_commit", observation
                    ),
                )
            sealed = self._seal(fence, observation, transaction_id)
            if sealed is None:
                msg = (
                    f"cannot abort {transaction_id!r}: the owner would not seal its "
                    f"absence ({observation.presence.value})"
                )
                raise ArtifactLeaseJournalError(msg)
            return self._finish(
                lambda: self.abort(transaction_id, aborted_at=at),
                _report(transaction_id, Status.ABORTED, "operator_abort", sealed),
            )

    def _reconcile_prepared(  # noqa: PLR0911 - one return per row of S5.2
        self,
        lease: Lease,
        owner: ArtifactReferenceOwner,
        resolved_at: datetime | None,
    ) -> ArtifactReconciliationReport:
        transaction_id = lease.transaction_id
        if lease.phase is not ArtifactLeasePhase.PREPARED:
            return _report(transaction_id, _ALREADY[lease.phase], "not_pending")
        at = self._time(resolved_at, "resolved_at")
        with owner.inspect_fenced(lease.transaction) as fence:
            observation = fence.observation
            # Another reconciler may have decided before this fence was ours.
            lease = self.session.store.get_lease(transaction_id)
            if lease.phase is not ArtifactLeasePhase.PREPARED:
                return _report(
                    transaction_id, _ALREADY[lease.phase], "not_pending", observation
                )
            presence = observation.presence
            if presence is ArtifactReferencePresence.UNKNOWN:
                return _report(
                    transaction_id, Status.PENDING_UNKNOWN, "owner_unknown", observation
                )
            if presence is ArtifactReferencePresence.PUBLISHED:
                if not _matches(observation, lease.claim):
                    return _report(
                        transaction_id,
                        Status.PENDING_CONFLICT,
                        "identity_mismatch",
                        observation,
                    )
                return self._finish(
                    lambda: self.commit(transaction_id, committed_at=at),
                    _report(
                        transaction_id, Status.COMMITTED, "owner_published", observation
                    ),
                )
            reason = (
                "absence_already_sealed"
                if observation.absence_sealed
                else "absence_sealed"
            )
            if not self.session.safeguards.tombstone_first:
                # The planted bug of S5.3: ABORTED first, the tombstone after.
                aborted = self._finish(
                    lambda: self.abort(transaction_id, aborted_at=at),
                    _report(transaction_id, Status.ABORTED, reason, observation),
                )
                self._seal(fence, observation, transaction_id)
                return aborted
            sealed = self._seal(fence, observation, transaction_id)
            if sealed is None:
                return _report(
                    transaction_id,
                    Status.PENDING_STALE,
                    "generation_changed",
                    observation,
                )
            return self._finish(
                lambda: self.abort(transaction_id, aborted_at=at),
                _report(transaction_id, Status.ABORTED, reason, sealed),
            )

    def _reconcile_release(
        self,
        lease: Lease,
        owner: ArtifactReferenceOwner,
        resolved_at: datetime | None,
    ) -> ArtifactReconciliationReport:
        transaction_id = lease.transaction_id
        at = self._time(resolved_at, "resolved_at")
        with owner.inspect_fenced(lease.transaction) as fence:
            observation = fence.observation
            lease = self.session.store.get_lease(transaction_id)
            if not LEASE_MACHINE.allows(lease.phase, "release"):
                status = _ALREADY.get(lease.phase, Status.PENDING_UNKNOWN)
                return _report(transaction_id, status, "not_committed", observation)
            presence = observation.presence
            if presence is ArtifactReferencePresence.UNKNOWN:
                return _report(
                    transaction_id, Status.PENDING_UNKNOWN, "owner_unknown", observation
                )
            if presence is ArtifactReferencePresence.PUBLISHED:
                return _report(
                    transaction_id,
                    Status.STILL_PUBLISHED,
                    "owner_published",
                    observation,
                )
            sealed = self._seal(fence, observation, transaction_id)
            if sealed is None:
                return _report(
                    transaction_id,
                    Status.PENDING_STALE,
                    "generation_changed",
                    observation,
                )
            return self._finish(
                lambda: self.release(transaction_id, released_at=at),
                _report(transaction_id, Status.RELEASED, "owner_absent", sealed),
            )

    def _finish(
        self,
        record: Callable[[], ArtifactLeaseState],
        report: ArtifactReconciliationReport,
    ) -> ArtifactReconciliationReport:
        """Record the terminal event; a reconciler that got there first wins (S5.4).

        An owner may end its fence's exclusivity when it commits a seal (SQLite
        must, so the tombstone is durable before ABORTED): a second reconciler
        can then reach this point for the same lease.
        """
        try:
            record()
        except _AlreadyDecided as decided:
            return _report(
                report.transaction_id, _ALREADY[decided.phase], "decided_concurrently"
            )
        return report

    def _seal(
        self,
        fence: ArtifactReferenceFence,
        observation: ArtifactReferenceObservation,
        transaction_id: str,
    ) -> ArtifactReferenceObservation | None:
        """Tombstone the id unless it is (S5.3); None if the generation moved."""
        if observation.absence_sealed:
            return observation
        if observation.presence is not ArtifactReferencePresence.ABSENT:
            return None
        try:
            sealed = fence.seal_absent()
        except ArtifactOwnerGenerationChanged:
            return None
        if sealed.transaction_id != transaction_id or not sealed.absence_sealed:
            msg = f"owner returned a seal that is not for {transaction_id!r}"
            raise ArtifactLeaseJournalError(msg)
        self._checkpoint("after_owner_absence_sealed")
        return sealed

    # -------------------------------------------------------------- plumbing

    def _transition(
        self,
        command: Callable[[str, datetime], Lease],
        transaction_id: str,
        at: datetime | None,
        trigger: str,
    ) -> ArtifactLeaseState:
        """Record one lease event and project it to the journal, under the lock."""
        phase = LEASE_MACHINE.state_after(trigger)
        moment = self._time(at, f"{phase}_at")
        with self.session.lock:
            try:
                lease = command(transaction_id, moment)
            except ArtifactLeaseJournalError as error:
                # A store failure leaves the lease where it was: only one that
                # was decided and can no longer take this trigger was decided
                # by someone else.
                found = self.session.store.find_lease(transaction_id)
                if (
                    found is not None
                    and found.phase in _ALREADY
                    and not LEASE_MACHINE.allows(found.phase, trigger)
                ):
                    raise _AlreadyDecided(str(error), found.phase) from error
                raise
            # A journal failure here is not "already decided": it propagates.
            self._projection.sync()
        self._checkpoint(f"after_{phase}")
        return lease.lease_state

    def _time(self, value: datetime | str | None, field: str) -> datetime:
        if value is None:
            return self.session.clock.now()
        return parse_timestamp(value, field)

    def _verify_artifact(self, claim: ArtifactRetentionClaim) -> None:
        """Demand a known, sealed, owned regular file with the claim's full digest."""
        filename = claim.parsed_source_id.filename
        artifact = self.session.store.get_artifact(filename)
        if artifact is None:
            msg = f"publication refused: artifact {filename} is unknown"
            raise ArtifactLeaseJournalError(msg)
        if artifact.state in _GONE:
            msg = f"publication refused: missing artifact {filename} ({artifact.state})"
            raise ArtifactMissingError(msg)
        if artifact.state not in _PUBLISHABLE:
            msg = f"publication refused: artifact {filename} is {artifact.state}"
            raise ArtifactLeaseJournalError(msg)
        content = artifact.stored_content
        if content is None or content.content_sha256 != claim.content_sha256:
            msg = f"publication refused: claim digest is not artifact {filename}'s"
            raise ArtifactLeaseJournalError(msg)
        with LocalArtifactStore(self.session) as store:
            try:
                fd = open_artifact_file(self.session.fs, filename, dir_fd=store.dir_fd)
            except (FileNotFoundError, ArtifactAccessError) as error:
                msg = f"publication refused: missing artifact {filename} ({error})"
                raise ArtifactMissingError(msg) from error
            try:
                digest, size = digest_open_file(self.session.fs, fd)
            finally:
                self.session.fs.close(fd)
        if (digest, size) != (content.content_sha256, content.size_bytes):
            msg = f"publication refused: artifact {filename} changed on disk"
            raise ArtifactLeaseJournalError(msg)


class _AlreadyDecided(ArtifactLeaseJournalError):
    """The store refused a transition: the lease had already ended."""

    def __init__(self, message: str, phase: ArtifactLeasePhase) -> None:
        super().__init__(message)
        self.phase = phase


def _check_transaction_id(transaction_id: str | None) -> str:
    if transaction_id is None:
        return f"tx-{uuid.uuid4()}"
    if not isinstance(transaction_id, str) or not transaction_id.strip():
        msg = f"transaction_id must be a non-empty string, not {transaction_id!r}"
        raise ArtifactLeaseJournalError(msg)
    if "\x00" in transaction_id or len(transaction_id) > 1024:
        msg = "transaction_id must hold no NUL and at most 1024 characters"
        raise ArtifactLeaseJournalError(msg)
    return transaction_id


def _phases_to(phase: ArtifactLeasePhase) -> tuple[ArtifactLeasePhase, ...]:
    if phase is ArtifactLeasePhase.PREPARED:
        return (phase,)
    return (ArtifactLeasePhase.PREPARED, phase)


def _matches(
    observation: ArtifactReferenceObservation, claim: ArtifactRetentionClaim
) -> bool:
    return (
        observation.presence is ArtifactReferencePresence.PUBLISHED
        and observation.source_id == claim.source_id
        and observation.content_sha256 == claim.content_sha256
    )


_MAX_MIN_AGE_SECONDS = 10.0**12  # about 31,700 years: within timedelta's range


def _as_timedelta(value: timedelta | float) -> timedelta:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            msg = "min_age must be >= 0"
            raise ArtifactRetentionError(msg)
        return value
    if not isinstance(value, int | float) or isinstance(value, bool):
        msg = f"min_age must be seconds or a timedelta, not {shown(value)}"
        raise TypeError(msg)
    # timedelta() overflows past 999999999 days and takes NaN for a moment.
    problem = number_problem("min_age", value, 0, _MAX_MIN_AGE_SECONDS)
    if problem is not None:
        raise ArtifactRetentionError(problem)
    return timedelta(seconds=value)


def _report(
    transaction_id: str,
    status: ArtifactReconciliationStatus,
    reason: str,
    observation: ArtifactReferenceObservation | None = None,
) -> ArtifactReconciliationReport:
    return ArtifactReconciliationReport(
        transaction_id=transaction_id,
        status=status,
        reason=reason,
        observed_generation=None if observation is None else observation.generation,
    )


__all__ = ["SessionRetentionJournal"]
