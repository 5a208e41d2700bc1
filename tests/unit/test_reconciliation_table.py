"""The S5.2 reconciliation table (domain/reconciliation.py): pure, total, seed's words.

Every (pass, lease phase, owner observation) gives exactly one decision whose
reason is a code of `ArtifactReconciliationReason`; a step is proposed only
where the lease machine allows it, and a journal event only on this
transaction's own, confirmed answer. The rows of docs/contract.md's table are
spelled out below, then checked against every combination Hypothesis finds.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.enums import (
    ArtifactLeasePhase,
    ArtifactReconciliationReason,
    ArtifactReconciliationStatus,
    ArtifactReferencePresence,
)
from spillvault.domain.machines import LEASE_MACHINE
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
from spillvault.domain.values import (
    ArtifactReferenceObservation,
    ArtifactRetentionClaim,
)

Phase = ArtifactLeasePhase
Presence = ArtifactReferencePresence
Reason = ArtifactReconciliationReason
Status = ArtifactReconciliationStatus
Step = ReconciliationStep
PENDING, RELEASES = ReconciliationPass.PENDING, ReconciliationPass.RELEASES
DECIDED, NOT_COMMITTED = Reason.LEASE_ALREADY_DECIDED, Reason.LEASE_NOT_COMMITTED

TX = "tx-1"
DIGEST = "ab" * 32
CLAIM = ArtifactRetentionClaim(f"artifact:s:tool_result_001.txt:{DIGEST[:12]}", DIGEST)
OTHER_DIGEST = "cd" * 32
OTHER_SOURCE = f"artifact:s:tool_result_002.txt:{OTHER_DIGEST[:12]}"
SEED_REASONS = {
    Reason.OWNER_CONFIRMED_REFERENCE,
    Reason.OWNER_RESULT_UNKNOWN,
    Reason.OWNER_REFERENCE_MISMATCH,
    Reason.OWNER_GENERATION_CHANGED,
    Reason.OWNER_TRANSACTION_MISMATCH,
    Reason.OWNER_ABSENCE_NOT_SEALED,
    Reason.OWNER_SEALED_ABSENCE,
}
# What each step records, and the lease trigger it fires.
TRIGGER = {
    Step.COMMIT: "commit",
    Step.SEAL_THEN_ABORT: "abort",
    Step.SEAL_THEN_RELEASE: "release",
}
STATUS_OF_STEP = {
    Step.COMMIT: Status.COMMITTED,
    Step.SEAL_THEN_ABORT: Status.ABORTED,
    Step.SEAL_THEN_RELEASE: Status.RELEASED,
}


def observed(
    presence: Presence,
    *,
    transaction_id: str = TX,
    source_id: str | None = None,
    digest: str | None = None,
    sealed: bool = False,
    generation: int = 3,
) -> ArtifactReferenceObservation:
    published = presence is Presence.PUBLISHED
    return ArtifactReferenceObservation(
        transaction_id=transaction_id,
        generation=generation,
        presence=presence,
        source_id=(source_id or CLAIM.source_id) if published else None,
        content_sha256=(digest or CLAIM.content_sha256) if published else None,
        absence_sealed=sealed,
    )


def decided(
    reconciliation: ReconciliationPass,
    phase: Phase,
    observation: ArtifactReferenceObservation,
) -> ReconciliationDecision:
    return decide(reconciliation, phase, observation, transaction_id=TX, claim=CLAIM)


# the rows of S5.2 ------------------------------------------------------------------

PENDING_ROWS = [
    ("published, same identity", observed(Presence.PUBLISHED),
     (Status.COMMITTED, Reason.OWNER_CONFIRMED_REFERENCE, Step.COMMIT)),
    ("published, another source", observed(Presence.PUBLISHED, source_id=OTHER_SOURCE),
     (Status.PENDING_CONFLICT, Reason.OWNER_REFERENCE_MISMATCH, Step.NOTHING)),
    ("published, another digest", observed(Presence.PUBLISHED, digest=OTHER_DIGEST),
     (Status.PENDING_CONFLICT, Reason.OWNER_REFERENCE_MISMATCH, Step.NOTHING)),
    ("unknown", observed(Presence.UNKNOWN),
     (Status.PENDING_UNKNOWN, Reason.OWNER_RESULT_UNKNOWN, Step.NOTHING)),
    ("absent, not sealed", observed(Presence.ABSENT),
     (Status.ABORTED, Reason.OWNER_SEALED_ABSENCE, Step.SEAL_THEN_ABORT)),
    ("absent, sealed", observed(Presence.ABSENT, sealed=True),
     (Status.ABORTED, Reason.OWNER_SEALED_ABSENCE, Step.SEAL_THEN_ABORT)),
    ("another transaction's answer", observed(Presence.PUBLISHED, transaction_id="x"),
     (Status.PENDING_CONFLICT, Reason.OWNER_TRANSACTION_MISMATCH, Step.NOTHING)),
]  # fmt: skip
RELEASE_ROWS = [
    ("published, same identity", observed(Presence.PUBLISHED),
     (Status.STILL_PUBLISHED, Reason.OWNER_CONFIRMED_REFERENCE, Step.NOTHING)),
    ("published, another digest", observed(Presence.PUBLISHED, digest=OTHER_DIGEST),
     (Status.STILL_PUBLISHED, Reason.OWNER_REFERENCE_MISMATCH, Step.NOTHING)),
    ("unknown", observed(Presence.UNKNOWN),
     (Status.PENDING_UNKNOWN, Reason.OWNER_RESULT_UNKNOWN, Step.NOTHING)),
    ("absent", observed(Presence.ABSENT),
     (Status.RELEASED, Reason.OWNER_SEALED_ABSENCE, Step.SEAL_THEN_RELEASE)),
    ("another transaction's answer", observed(Presence.ABSENT, transaction_id="x"),
     (Status.PENDING_CONFLICT, Reason.OWNER_TRANSACTION_MISMATCH, Step.NOTHING)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("observation", "cell"),
    [pytest.param(o, c, id=name) for name, o, c in PENDING_ROWS],
)
def test_the_pending_rows_of_s52(
    observation: ArtifactReferenceObservation, cell: tuple[Status, Reason, Step]
) -> None:
    decision = decided(PENDING, Phase.PREPARED, observation)
    assert (decision.status, decision.reason, decision.step) == cell


@pytest.mark.parametrize(
    ("observation", "cell"),
    [pytest.param(o, c, id=name) for name, o, c in RELEASE_ROWS],
)
def test_the_release_rows_of_s52(
    observation: ArtifactReferenceObservation, cell: tuple[Status, Reason, Step]
) -> None:
    decision = decided(RELEASES, Phase.COMMITTED, observation)
    assert (decision.status, decision.reason, decision.step) == cell


def test_a_seal_that_does_not_take_leaves_the_lease_pending() -> None:
    sealed = observed(Presence.ABSENT, sealed=True, generation=4)
    assert seal_problem(TX, sealed) is None
    assert seal_problem(TX, replace(sealed, absence_sealed=False)) == (
        ReconciliationDecision(Status.PENDING_STALE, Reason.OWNER_ABSENCE_NOT_SEALED)
    )
    assert seal_problem(TX, replace(sealed, transaction_id="x")) == (
        ReconciliationDecision(
            Status.PENDING_CONFLICT, Reason.OWNER_TRANSACTION_MISMATCH
        )
    )
    assert (GENERATION_MOVED.status, GENERATION_MOVED.reason) == (
        Status.PENDING_STALE,
        Reason.OWNER_GENERATION_CHANGED,
    )


@pytest.mark.parametrize(
    ("reconciliation", "phase", "cell"),
    [
        (PENDING, Phase.COMMITTED, (Status.ALREADY_COMMITTED, DECIDED)),
        (PENDING, Phase.ABORTED, (Status.ALREADY_ABORTED, DECIDED)),
        (PENDING, Phase.RELEASED, (Status.ALREADY_RELEASED, DECIDED)),
        (RELEASES, Phase.RELEASED, (Status.ALREADY_RELEASED, DECIDED)),
        (RELEASES, Phase.PREPARED, (Status.PENDING_UNKNOWN, NOT_COMMITTED)),
    ],
)  # fmt: skip
def test_a_lease_the_pass_does_not_settle_is_reported_without_asking_the_owner(
    reconciliation: ReconciliationPass, phase: Phase, cell: tuple[Status, Reason]
) -> None:
    done = settled(reconciliation, phase)
    assert done is not None
    assert (done.status, done.reason, done.step) == (*cell, Step.NOTHING)
    assert settled(reconciliation, reconciliation.value) is None


def test_the_fixed_cells_use_codes_of_their_own() -> None:
    assert (YOUNGER_THAN_MIN_AGE.status, YOUNGER_THAN_MIN_AGE.reason) == (
        Status.SKIPPED_YOUNG,
        Reason.LEASE_YOUNGER_THAN_MIN_AGE,
    )
    assert (OPERATOR_COMMITTED.status, OPERATOR_COMMITTED.reason) == (
        Status.COMMITTED,
        Reason.OPERATOR_COMMIT,
    )
    assert (OPERATOR_ABORTED.status, OPERATOR_ABORTED.reason) == (
        Status.ABORTED,
        Reason.OPERATOR_ABORT,
    )
    assert already(Phase.COMMITTED).status is Status.ALREADY_COMMITTED


# every combination ----------------------------------------------------------------

observations = st.builds(
    lambda presence, tx, source, digest, sealed, generation: observed(
        presence,
        transaction_id=tx,
        source_id=source,
        digest=digest,
        sealed=sealed and presence is Presence.ABSENT,
        generation=generation,
    ),
    st.sampled_from(Presence),
    st.sampled_from([TX, "tx-2"]),
    st.sampled_from([CLAIM.source_id, OTHER_SOURCE]),
    st.sampled_from([CLAIM.content_sha256, OTHER_DIGEST]),
    st.booleans(),
    st.integers(min_value=0, max_value=2**63),
)


@given(
    reconciliation=st.sampled_from(ReconciliationPass),
    phase=st.sampled_from(Phase),
    observation=observations,
)
def test_every_pair_gives_one_decision_in_the_vocabulary(
    reconciliation: ReconciliationPass,
    phase: Phase,
    observation: ArtifactReferenceObservation,
) -> None:
    decision = decided(reconciliation, phase, observation)
    assert decision == decided(reconciliation, phase, observation)  # a function
    assert isinstance(decision.status, Status)
    assert isinstance(decision.reason, Reason)
    assert re.fullmatch(r"[a-z]+(_[a-z]+)+", decision.reason.value)
    if decision.step is Step.NOTHING:
        assert decision.status not in STATUS_OF_STEP.values()
        return
    # A step records exactly the event its status names, one the machine allows.
    assert decision.status is STATUS_OF_STEP[decision.step]
    assert LEASE_MACHINE.allows(phase, TRIGGER[decision.step])
    assert phase is reconciliation.value
    # ... and only on this transaction's own answer, in the seed's words.
    assert observation.transaction_id == TX
    assert decision.reason in SEED_REASONS
    if decision.step is Step.COMMIT:
        assert confirms(observation, TX, CLAIM)
    else:
        assert observation.presence is Presence.ABSENT


@given(
    reconciliation=st.sampled_from(ReconciliationPass),
    phase=st.sampled_from(Phase),
    observation=observations,
)
def test_only_a_lease_of_the_pass_is_put_to_the_owner(
    reconciliation: ReconciliationPass,
    phase: Phase,
    observation: ArtifactReferenceObservation,
) -> None:
    decision = decided(reconciliation, phase, observation)
    if phase is reconciliation.value:
        assert settled(reconciliation, phase) is None
        assert decision.reason in SEED_REASONS
    else:
        assert decision == settled(reconciliation, phase)
        assert decision.reason not in SEED_REASONS


@given(sealed=observations)
def test_a_seal_passes_only_for_this_transactions_sealed_absence(
    sealed: ArtifactReferenceObservation,
) -> None:
    problem = seal_problem(TX, sealed)
    ok = sealed.transaction_id == TX and sealed.absence_sealed
    assert (problem is None) == ok
    if problem is not None:
        assert problem.step is Step.NOTHING
        assert problem.status in {Status.PENDING_CONFLICT, Status.PENDING_STALE}
        assert problem.reason in SEED_REASONS
