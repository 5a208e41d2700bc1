"""`SessionRetentionJournal`: leases, publication, removal, reconciliation (S4, S5).

The event store is the authority (S4.4); `retention-leases.jsonl` is its
hash-chained projection, written before any owner call that depends on the
event (S4.5). Publication re-verifies the artifact and records PREPARED
under the session lock, releases the lock, calls the publisher, then records
COMMITTED (S4.6). Reconciliation observes, seals and records inside the
owner's fence what the pure table of `domain.reconciliation` decides,
tombstone before ABORTED (S5.2, S5.3). Lock order: owner fence, then the
session lock; neither is held across a publisher or remover call.
"""

from __future__ import annotations

import uuid
from contextlib import closing, nullcontext
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Self, TypeVar

from spillvault.adapters.services.lease_projection import (
    JournalReport,
    LeaseEvent,
    session_projection,
)
from spillvault.domain.bounds import number_problem, shown
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import (
    ArtifactLeasePhase,
    ArtifactReferencePresence,
)
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactMissingError,
    ArtifactOwnerGenerationChanged,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.machines import ARTIFACT_MACHINE, LEASE_MACHINE
from spillvault.domain.reconciliation import (
    GENERATION_MOVED,
    OPERATOR_ABORTED,
    OPERATOR_COMMITTED,
    YOUNGER_THAN_MIN_AGE,
    ReconciliationDecision,
    ReconciliationPass,
    ReconciliationStep,
    already,
    confirms,
    decide,
    seal_problem,
    settled,
)
from spillvault.domain.session_view import LiveLease, aggregate_claims
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
    from collections.abc import Callable, Iterable
    from types import TracebackType

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.lease import Lease
    from spillvault.domain.ports import (
        ArtifactReferenceFence,
        ArtifactReferenceOwner,
        ArtifactStore,
    )

T = TypeVar("T")
_PUBLISHABLE = ARTIFACT_MACHINE.tagged("publishable")
_GONE = ARTIFACT_MACHINE.terminal_states  # deleted by GC, or found lost: no bytes
# What an operator may decide for a pending lease: where one transition takes it.
_DECISIONS = LEASE_MACHINE.next_states(ArtifactLeasePhase.PREPARED)
_RELEASABLE = " or ".join(sorted(LEASE_MACHINE.sources_of("release")))


class SessionRetentionJournal:
    """A session's retention leases and their journal (seed-compatible API)."""

    def __init__(
        self,
        session: SessionHandles,
        *,
        open_artifacts: Callable[[], ArtifactStore],
        owns_session: bool = False,
    ) -> None:
        self._owns_session = owns_session
        self.session = session
        self._open_artifacts = open_artifacts
        try:
            self._projection = session_projection(self.session)
        except BaseException:
            if self._owns_session:
                self.session.close()
            raise

    @property
    def path(self) -> Path:
        """The journal file's path."""
        return Path(self.session.path, RETENTION_JOURNAL_NAME)

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
        transaction, _ = self._prepare(claim, transaction_id, prepared_at)
        return transaction

    def _prepare(
        self,
        claim: ArtifactRetentionClaim,
        transaction_id: str | None,
        prepared_at: datetime | None,
    ) -> tuple[ArtifactLeaseTransaction, Lease]:
        """`prepare`; also return the lease as saved, for the flow's next step."""
        if not isinstance(claim, ArtifactRetentionClaim):
            msg = f"claim must be an ArtifactRetentionClaim, not {type(claim).__name__}"
            raise TypeError(msg)
        claim.check_session(self.session_id)
        transaction = ArtifactLeaseTransaction(
            transaction_id=_check_transaction_id(transaction_id),
            claim=claim,
            prepared_at=self._time(prepared_at, "prepared_at"),
        )
        store = self.session.store
        lock = self.session.lock if self.session.safeguards.publication_lock else None
        with lock or nullcontext():
            try:
                self._verify_artifact(claim)
                # A used id cannot be saved again: the lease's first event exists.
                lease = store.prepare_lease(transaction)
            except Exception as error:
                # Whatever else is wrong, a used id is refused as such (S4.8).
                if store.lease_recorded(transaction.transaction_id):
                    raise _used(transaction.transaction_id) from error
                raise
            self._projection.sync_recorded()
        self._checkpoint("after_prepared")
        return transaction, lease

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
        transaction, lease = self._prepare(claim, transaction_id, prepared_at)
        transaction_id = transaction.transaction_id
        store = self.session.store
        # The lease as prepared: unless a reconciler recorded an event since (a
        # lost race, decided again on the reloaded lease), it needs no load.
        try:
            value = publisher()
        except ArtifactPublicationRejected:
            abort = partial(store.abort_lease, saved=lease)
            self._unless_decided(
                lambda: self._transition(abort, transaction_id, None, "abort"),
                "abort",
            )
            raise
        commit = partial(store.commit_lease, saved=lease)
        self._unless_decided(
            lambda: self._transition(commit, transaction_id, committed_at, "commit"),
            "commit",
        )
        return transaction, value

    def remove_reference(
        self,
        transaction_id: str,
        remover: Callable[[], T],
        *,
        released_at: datetime | None = None,
    ) -> T:
        """Let the owner delete first, then record RELEASED; return what it returned."""
        lease = self.session.store.get_lease(transaction_id)
        if not LEASE_MACHINE.allows(lease.phase, "release"):
            msg = (
                f"cannot remove {transaction_id!r}: the lease is "
                f"{lease.phase.value}, not {_RELEASABLE}"
            )
            raise ArtifactLeaseJournalError(msg)
        value = remover()
        self._unless_decided(
            lambda: self.release(transaction_id, released_at=released_at), "release"
        )
        return value

    def _unless_decided(
        self, record: Callable[[], ArtifactLeaseState], trigger: str
    ) -> None:
        """Record a flow's own event, unless a reconciler recorded it first (S5.4)."""
        # No lock is held across the publisher or remover: a reconciler can see
        # the owner's new state and record the same outcome before the flow,
        # and the lease may have moved on from that outcome since.
        try:
            record()
        except _AlreadyDecided as decided:
            outcome = LEASE_MACHINE.state_after(trigger)
            if decided.phase not in LEASE_MACHINE.reachable_from(outcome):
                raise

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
        """Fold every lease event: each transaction's phases, terminal ones too (S4.7).

        The claims are what the live leases protect at `now` (a prepared one
        with no expiry); all three parts come from the same fold.
        """
        at = self._time(now, "now")
        states = _lease_states(self._projection.lease_events())
        live = [
            LiveLease(
                state.transaction.transaction_id,
                state.current_phase,
                state.transaction.claim,
                state.transaction.prepared_at,
            )
            for state in states
            if state.current_phase not in LEASE_MACHINE.terminal_states
        ]
        return ArtifactLeaseRecovery(
            session_id=self.session_id,
            claims=aggregate_claims(live, at),
            pending_transaction_ids=tuple(
                lease.transaction_id
                for lease in live
                if lease.phase is ArtifactLeasePhase.PREPARED
            ),
            states=states,
        )

    def current_claims(
        self, *, now: datetime | None = None
    ) -> tuple[ArtifactRetentionClaim, ...]:
        """Return the aggregated claims that protect artifacts at `now`."""
        at = self._time(now, "now")
        return aggregate_claims(self._projection.live_leases().values(), at)

    @property
    def pending_transaction_ids(self) -> tuple[str, ...]:
        """The PREPARED transactions awaiting reconciliation."""
        return tuple(
            sorted(
                tx
                for tx, lease in self._projection.live_leases().items()
                if lease.phase is ArtifactLeasePhase.PREPARED
            )
        )

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
        return self._reconcile(ReconciliationPass.PENDING, lease, owner, resolved_at)

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
                reports.append(_report(live.transaction_id, YOUNGER_THAN_MIN_AGE))
                continue
            lease = self.session.store.get_lease(live.transaction_id)
            reports.append(
                self._reconcile(ReconciliationPass.PENDING, lease, owner, at)
            )
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
            self._reconcile(
                ReconciliationPass.RELEASES, self.session.store.get_lease(tx), owner, at
            )
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
            done = settled(ReconciliationPass.PENDING, lease.phase)
            if done is not None:
                return _report(transaction_id, done, observation)
            if decision is ArtifactLeasePhase.COMMITTED:
                if not confirms(observation, transaction_id, lease.claim):
                    msg = (
                        f"cannot commit {transaction_id!r}: the owner does not hold "
                        f"the reference ({observation.presence.value})"
                    )
                    raise ArtifactLeaseJournalError(msg)
                return self._finish(
                    lambda: self.commit(transaction_id, committed_at=at),
                    _report(transaction_id, OPERATOR_COMMITTED, observation),
                )
            # Only this id's absence can be sealed: an operator never tombstones
            # a reference the owner holds, cannot answer for, or answers for
            # another id.
            sealed = (
                self._seal(fence, observation, transaction_id)
                if observation.presence is ArtifactReferencePresence.ABSENT
                and observation.transaction_id == transaction_id
                else None
            )
            if not isinstance(sealed, ArtifactReferenceObservation):
                msg = (
                    f"cannot abort {transaction_id!r}: the owner would not seal its "
                    f"absence ({observation.presence.value})"
                )
                raise ArtifactLeaseJournalError(msg)
            return self._finish(
                lambda: self.abort(transaction_id, aborted_at=at),
                _report(transaction_id, OPERATOR_ABORTED, sealed),
            )

    def _reconcile(
        self,
        reconciliation: ReconciliationPass,
        lease: Lease,
        owner: ArtifactReferenceOwner,
        resolved_at: datetime | None,
    ) -> ArtifactReconciliationReport:
        """Look up the S5.2 table inside the owner's fence and take its step."""
        transaction_id = lease.transaction_id
        done = settled(reconciliation, lease.phase)
        if done is not None:
            return _report(transaction_id, done)
        at = self._time(resolved_at, "resolved_at")
        with owner.inspect_fenced(lease.transaction) as fence:
            observation = fence.observation
            # Another reconciler may have decided before this fence was ours.
            lease = self.session.store.get_lease(transaction_id)
            decision = decide(
                reconciliation,
                lease.phase,
                observation,
                transaction_id=transaction_id,
                claim=lease.claim,
            )
            step = decision.step
            if step is ReconciliationStep.NOTHING:
                return _report(transaction_id, decision, observation)
            if step is ReconciliationStep.COMMIT:
                return self._finish(
                    lambda: self.commit(transaction_id, committed_at=at),
                    _report(transaction_id, decision, observation),
                )
            record = (
                partial(self.release, transaction_id, released_at=at)
                if step is ReconciliationStep.SEAL_THEN_RELEASE
                else partial(self.abort, transaction_id, aborted_at=at)
            )
            if (
                step is ReconciliationStep.SEAL_THEN_ABORT
                and not self.session.safeguards.tombstone_first
            ):
                # The planted bug of S5.3: ABORTED first, the tombstone after.
                aborted = self._finish(
                    record, _report(transaction_id, decision, observation)
                )
                self._seal(fence, observation, transaction_id)
                return aborted
            sealed = self._seal(fence, observation, transaction_id)
            if isinstance(sealed, ReconciliationDecision):
                return _report(transaction_id, sealed, observation)
            return self._finish(record, _report(transaction_id, decision, sealed))

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
            return _report(report.transaction_id, already(decided.phase))
        return report

    def _seal(
        self,
        fence: ArtifactReferenceFence,
        observation: ArtifactReferenceObservation,
        transaction_id: str,
    ) -> ArtifactReferenceObservation | ReconciliationDecision:
        """Tombstone the id unless it is (S5.3); the table's answer if that fails."""
        if observation.absence_sealed:
            return observation
        try:
            sealed = fence.seal_absent()
        except ArtifactOwnerGenerationChanged:
            return GENERATION_MOVED
        problem = seal_problem(transaction_id, sealed)
        if problem is not None:
            return problem
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
                    and found.phase not in LEASE_MACHINE.creation_states
                    and not LEASE_MACHINE.allows(found.phase, trigger)
                ):
                    raise _AlreadyDecided(str(error), found.phase) from error
                raise
            # A journal failure here is not "already decided": it propagates.
            self._projection.sync_recorded()
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
        with closing(self._open_artifacts()) as store:
            try:
                store.confirm(filename, content)
            except (FileNotFoundError, ArtifactAccessError) as error:
                msg = f"publication refused: missing artifact {filename} ({error})"
                raise ArtifactMissingError(msg) from error
            except ArtifactIntegrityError as error:
                msg = f"publication refused: artifact {filename} changed ({error})"
                raise ArtifactLeaseJournalError(msg) from error


class _AlreadyDecided(ArtifactLeaseJournalError):
    """The store refused a transition: the lease had already ended."""

    def __init__(self, message: str, phase: ArtifactLeasePhase) -> None:
        super().__init__(message)
        self.phase = phase


def _used(transaction_id: str) -> ArtifactLeaseJournalError:
    return ArtifactLeaseJournalError(f"transaction id already used: {transaction_id!r}")


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


def _lease_states(events: Iterable[LeaseEvent]) -> tuple[ArtifactLeaseState, ...]:
    """Fold lease events into each transaction's phases, by transaction id."""
    transactions: dict[str, ArtifactLeaseTransaction] = {}
    phases: dict[str, list[ArtifactLeasePhase]] = {}
    for _, transaction_id, phase, fields in events:
        if phase is ArtifactLeasePhase.PREPARED:
            transactions[transaction_id] = ArtifactLeaseTransaction(
                transaction_id,
                ArtifactRetentionClaim.from_dict(fields["claim"]),
                parse_timestamp(fields["prepared_at"], "prepared_at"),
            )
        phases.setdefault(transaction_id, []).append(phase)
    return tuple(
        ArtifactLeaseState(transactions[tx], tuple(phases[tx]))
        for tx in sorted(transactions)
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
    decision: ReconciliationDecision,
    observation: ArtifactReferenceObservation | None = None,
) -> ArtifactReconciliationReport:
    return ArtifactReconciliationReport(
        transaction_id=transaction_id,
        status=decision.status,
        reason=decision.reason,
        observed_generation=None if observation is None else observation.generation,
    )


__all__ = ["SessionRetentionJournal"]
