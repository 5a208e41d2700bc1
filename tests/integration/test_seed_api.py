"""The seed's public API, exactly (issue 14 §5).

Paths are `pathlib.Path` while handles stay text; a cleanup report carries
every decision of its plan; a lease recovery lists every transaction, terminal
ones too, and is JSON-ready; every cleanup decision and reconciliation report
carries a snake_case reason code of the seed's vocabulary; `remove_reference`
returns what the remover returned.
"""

from __future__ import annotations

import errno
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spillvault import (
    RETENTION_JOURNAL_NAME,
    ArtifactCleanupPolicy,
    ArtifactCleanupReason,
    ArtifactLeasePhase,
    ArtifactPublicationRejected,
    ArtifactReconciliationReason,
    ArtifactReconciliationStatus,
    ArtifactReferenceObservation,
    ArtifactRetentionError,
    ArtifactRetentionJournal,
    InMemoryOwner,
)
from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.session import Session, open_session

from support.gc_world import (
    OLD,
    TTL,
    Status,
    applied,
    apply_gc,
    assert_path_free,
    claim_of,
    committed,
    deleting,
    name_of,
    plan_gc,
    set_mtime,
    state_of,
    statuses,
    stored,
)
from support.intercept import InterceptingFS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from spillvault.domain.ports import ArtifactReferenceFence
    from spillvault.domain.values import ArtifactLeaseTransaction

    from support.fakes import FakeClock

Phase = ArtifactLeasePhase
Reconciled = ArtifactReconciliationStatus
CODE = r"[a-z]+(_[a-z]+)+"

# --------------------------------------------------------- 1. paths and handles


def test_paths_are_pathlib_paths_and_handles_stay_text(
    session: Session, session_dir: Path
) -> None:
    ext = session.externalizer
    assert ext.tool_results_dir == session_dir / "tool-results"
    assert isinstance(ext.tool_results_dir, Path)
    assert session.journal.path == session_dir / RETENTION_JOURNAL_NAME
    assert isinstance(session.journal.path, Path)

    result = ext.externalize("a line of output\n" * 3000, "bash")
    reference = result.artifact
    assert isinstance(reference.path, Path)
    assert reference.path.parent == ext.tool_results_dir
    # the handle holds no path: it is <session-id>/<number> (issue 15)
    assert reference.handle == f"{session_dir.name}/1"
    assert str(reference.path) not in result.context_text
    assert reference.handle in result.context_text  # the model sees the text
    memory = reference.for_memory().to_dict()
    assert memory["artifact_path"] == reference.handle
    assert json.loads(json.dumps(memory)) == memory

    # The seed's reads take the path; the handle and the reference work as well.
    assert ext.read_from_disk(reference.path, 0, 1) == "a line of output"
    assert ext.read_artifact(reference.handle, 1, 1) == "a line of output"
    assert ext.read_artifact(reference, 2, 1) == "a line of output"
    assert ext.read_artifact(reference.source.source_id, 0, 1) == "a line of output"
    assert ext.read_artifact(reference, start_line=3, limit=1) == "a line of output"
    page = ext.handle_tool_call("read_artifact", {"handle": reference.handle})
    assert "a line of output" in page


def test_the_path_constructors_take_text_or_a_path(
    session: Session, session_dir: Path
) -> None:
    for where in (str(session_dir), session_dir):
        journal = ArtifactRetentionJournal(where)
        try:
            assert journal.path == session_dir / RETENTION_JOURNAL_NAME
        finally:
            journal.close()


# ------------------------------------------------- 2. the report of a cleanup


def test_a_cleanup_report_carries_every_decision_of_its_plan(
    session: Session, session_dir: Path
) -> None:
    kept, young, old = (stored(session, tag) for tag in ("kept", "young", "old"))
    committed(session, kept)
    now = session.clock.now() + OLD
    set_mtime(young.path, now - timedelta(minutes=1))
    plan = plan_gc(session, policy=deleting(), now=now)

    report = apply_gc(session, plan, now)

    assert (report.session_id, report.planned_at) == (session.session_id, now)
    assert report.applied_at == now
    assert report.dry_run is False
    assert statuses(report) == {
        name_of(kept): Status.RETAINED_REFERENCED,
        name_of(young): Status.RETAINED_RECENT,
        name_of(old): Status.DELETED,
    }
    assert applied(report, plan) == {name_of(old): Status.DELETED}
    assert report.counts == {
        "deleted": 1,
        "retained_recent": 1,
        "retained_referenced": 1,
    }
    data = report.to_dict()
    assert {"session_id", "planned_at", "applied_at", "dry_run", "decisions"} <= set(
        data
    )
    assert data["counts"] == report.counts
    assert len(data["decisions"]) == 3
    assert_path_free(data, session_dir)


def test_a_dry_run_report_carries_the_plan_as_planned(session: Session) -> None:
    ref = stored(session, "old")
    now = session.clock.now() + OLD
    plan = plan_gc(
        session, policy=ArtifactCleanupPolicy(orphan_ttl_seconds=TTL), now=now
    )
    report = apply_gc(session, plan, now)
    assert report.dry_run is True
    assert report.decisions == plan.decisions
    assert report.counts == {"planned_delete": 1}
    assert report.untouched == (name_of(ref),)
    assert state_of(session, name_of(ref)) == "sealed"


# ----------------------------------------------------------- 3. lease recovery


def test_recovery_lists_every_transaction_terminal_ones_too(
    session: Session, session_dir: Path
) -> None:
    ref = stored(session, "leased")
    journal = session.journal
    journal.publish_reference(claim_of(ref), lambda: None, transaction_id="committed")
    journal.publish_reference(claim_of(ref), lambda: None, transaction_id="released")
    journal.remove_reference("released", lambda: None)

    def rejected() -> None:
        msg = "refused before writing"
        raise ArtifactPublicationRejected(msg)

    with pytest.raises(ArtifactPublicationRejected):
        journal.publish_reference(claim_of(ref), rejected, transaction_id="aborted")
    journal.prepare(claim_of(ref, reference_count=2), transaction_id="prepared")

    recovery = journal.recover()

    assert {s.transaction.transaction_id: s.phases for s in recovery.states} == {
        "aborted": (Phase.PREPARED, Phase.ABORTED),
        "committed": (Phase.PREPARED, Phase.COMMITTED),
        "prepared": (Phase.PREPARED,),
        "released": (Phase.PREPARED, Phase.COMMITTED, Phase.RELEASED),
    }
    assert recovery.pending_transaction_ids == ("prepared",)
    (claim,) = recovery.claims
    assert claim.reference_count == 1 + 2  # the live leases only
    assert journal.current_claims() == recovery.claims
    assert journal.pending_transaction_ids == recovery.pending_transaction_ids

    data = recovery.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {"session_id", "claims", "pending_transaction_ids", "states"}
    assert data["pending_transaction_ids"] == ["prepared"]
    assert data["states"][0] == {
        "transaction": {
            "transaction_id": "aborted",
            "claim": claim_of(ref).to_dict(),
            "prepared_at": data["states"][0]["transaction"]["prepared_at"],
        },
        "phases": ["prepared", "aborted"],
    }
    assert_path_free(data, session_dir)


# --------------------------------------------------------- 4. the reason codes


def test_a_refused_deletion_is_denied_by_code_and_stops_the_run(
    session_dir: Path, clock: FakeClock
) -> None:
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs, clock=clock) as session:
        first, second = stored(session, "first"), stored(session, "second")
        now = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=now)
        with fs.fail("rename", errno.EACCES):  # a directory we may not write
            report = apply_gc(session, plan, now)
        denied = {d.filename: d for d in report.decisions}[name_of(first)]
        assert (denied.status, denied.reason) == (
            Status.DENIED,
            "artifact_delete_denied",
        )
        assert report.error is not None
        assert report.error.startswith(f"{name_of(first)}: ")
        assert report.untouched == (name_of(second),)
        assert first.path.exists()
        assert state_of(session, name_of(first)) == "sealed"  # settled, usable
        again = apply_gc(session, plan_gc(session, policy=deleting(), now=now), now)
        assert set(statuses(again).values()) == {Status.DELETED}


def test_gc_prints_and_writes_reason_codes(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_session(session_dir) as session:
        old = stored(session, "old")
        set_mtime(old.path, session.clock.now() - 3 * OLD)
    assert cli_main(["gc", "--session", str(session_dir)]) == 0
    assert "    1 x expired_unreferenced_artifact" in capsys.readouterr().out
    assert cli_main(["gc", "--session", str(session_dir), "--json", "--apply"]) == 0
    data = json.loads(capsys.readouterr().out)
    (planned,) = data["plan"]["decisions"]
    (deleted,) = data["report"]["decisions"]
    assert planned["reason"] == "expired_unreferenced_artifact"
    assert "past the TTL" in planned["detail"]
    assert deleted["reason"] == "expired_unreferenced_artifact_deleted"
    assert deleted["detail"] == "verified and unlinked"


def test_cleanup_reasons_are_codes_and_a_plan_refuses_an_unknown_one(
    session: Session,
) -> None:
    stored(session, "any")
    plan = plan_gc(session, policy=deleting(), now=session.clock.now() + OLD)
    assert {d.reason for d in plan.decisions} <= set(ArtifactCleanupReason)
    assert all(re.fullmatch(CODE, reason.value) for reason in ArtifactCleanupReason)
    data = plan.to_dict()
    data["decisions"][0]["reason"] = "unreferenced, 2.0 d old"  # a sentence
    with pytest.raises(ArtifactRetentionError, match="not a cleanup plan"):
        type(plan).from_dict(data)


@dataclass
class _BentFence:
    """A fence whose owner answers wrongly, as a buggy adapter would."""

    inner: ArtifactReferenceFence
    observation: ArtifactReferenceObservation
    bend_seal: Callable[[ArtifactReferenceObservation], ArtifactReferenceObservation]

    def seal_absent(self) -> ArtifactReferenceObservation:
        return self.bend_seal(self.inner.seal_absent())


class BentOwner(InMemoryOwner):
    """An in-memory owner whose observations or seals are bent on the way out."""

    def __init__(
        self,
        *,
        observe: Callable[
            [ArtifactReferenceObservation], ArtifactReferenceObservation
        ] = lambda o: o,
        seal: Callable[
            [ArtifactReferenceObservation], ArtifactReferenceObservation
        ] = lambda o: o,
    ) -> None:
        super().__init__()
        self.observe, self.seal = observe, seal

    @contextmanager
    def inspect_fenced(
        self, transaction: ArtifactLeaseTransaction
    ) -> Iterator[_BentFence]:
        with super().inspect_fenced(transaction) as fence:
            yield _BentFence(fence, self.observe(fence.observation), self.seal)


@pytest.mark.parametrize(
    ("owner", "status", "reason"),
    [
        pytest.param(
            BentOwner(observe=lambda o: replace(o, transaction_id="someone-else")),
            Reconciled.PENDING_CONFLICT,
            "owner_transaction_mismatch",
            id="an answer for another transaction",
        ),
        pytest.param(
            BentOwner(seal=lambda o: replace(o, transaction_id="someone-else")),
            Reconciled.PENDING_CONFLICT,
            "owner_transaction_mismatch",
            id="a seal for another transaction",
        ),
        pytest.param(
            BentOwner(seal=lambda o: replace(o, absence_sealed=False)),
            Reconciled.PENDING_STALE,
            "owner_absence_not_sealed",
            id="a seal that sealed nothing",
        ),
        pytest.param(
            InMemoryOwner(move_generation_for={"tx"}),
            Reconciled.PENDING_STALE,
            "owner_generation_changed",
            id="the generation moved",
        ),
        pytest.param(
            InMemoryOwner(unknown_for={"tx"}),
            Reconciled.PENDING_UNKNOWN,
            "owner_result_unknown",
            id="the owner cannot tell",
        ),
    ],
)
def test_an_owner_answer_that_settles_nothing_keeps_the_lease_by_code(
    session: Session,
    owner: InMemoryOwner,
    status: Reconciled,
    reason: str,
) -> None:
    ref = stored(session, "pending")
    session.journal.prepare(claim_of(ref), transaction_id="tx")
    report = session.journal.reconcile_reference("tx", owner)
    assert (report.status, report.reason) == (status, reason)
    assert report.to_dict()["reason"] == reason
    assert session.store.get_lease("tx").phase is Phase.PREPARED
    assert session.journal.pending_transaction_ids == ("tx",)


def test_every_reconciliation_outcome_names_its_reason_by_code(
    session: Session,
) -> None:
    ref = stored(session, "reconciled")
    journal = session.journal
    owner = InMemoryOwner()
    at = session.clock.now()
    for tx in ("published", "absent"):
        journal.prepare(claim_of(ref), transaction_id=tx, prepared_at=at - OLD)
    journal.prepare(claim_of(ref), transaction_id="fresh", prepared_at=at)
    owner.publish("published", ref.for_memory())
    journal.publish_reference(
        claim_of(ref), owner.publisher(ref.for_memory(), "gone"), transaction_id="gone"
    )
    owner.remove("gone")  # a removal that died before RELEASED

    reports = journal.reconcile_pending(owner, resolved_at=at, min_age=OLD / 2)
    reports += journal.reconcile_releases(owner, resolved_at=at)
    reports.append(journal.reconcile_reference("published", owner))

    assert {(r.transaction_id, r.status, r.reason) for r in reports} == {
        ("absent", Reconciled.ABORTED, "owner_sealed_absence"),
        ("published", Reconciled.COMMITTED, "owner_confirmed_reference"),
        ("fresh", Reconciled.SKIPPED_YOUNG, "lease_younger_than_min_age"),
        ("gone", Reconciled.RELEASED, "owner_sealed_absence"),
        ("published", Reconciled.STILL_PUBLISHED, "owner_confirmed_reference"),
        ("published", Reconciled.ALREADY_COMMITTED, "lease_already_decided"),
    }
    assert {r.reason for r in reports} <= set(ArtifactReconciliationReason)


def test_an_operators_decision_is_reported_by_code(session: Session) -> None:
    ref = stored(session, "resolved")
    journal = session.journal
    owner = InMemoryOwner()
    for tx in ("held", "lost"):
        journal.prepare(claim_of(ref), transaction_id=tx)
    owner.publish("held", ref.for_memory())

    kept = journal.resolve("held", owner, decision=Phase.COMMITTED, reason="seen")
    dropped = journal.resolve("lost", owner, decision=Phase.ABORTED, reason="gone")
    again = journal.resolve("held", owner, decision=Phase.ABORTED, reason="late")

    assert (kept.status, kept.reason) == (Reconciled.COMMITTED, "operator_commit")
    assert (dropped.status, dropped.reason) == (Reconciled.ABORTED, "operator_abort")
    assert (again.status, again.reason) == (
        Reconciled.ALREADY_COMMITTED,
        "lease_already_decided",
    )
    assert session.store.get_lease("held").phase is Phase.COMMITTED
    assert session.store.get_lease("lost").phase is Phase.ABORTED


def test_a_plan_applied_twice_finds_the_artifact_changed_by_code(
    session: Session,
) -> None:
    ref = stored(session, "once")
    now = session.clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=now)
    assert applied(apply_gc(session, plan, now), plan) == {name_of(ref): Status.DELETED}
    (outcome,) = apply_gc(session, plan, now).decisions
    assert (outcome.status, outcome.reason) == (
        Status.RACE_DETECTED,
        "artifact_changed_after_cleanup_plan",
    )
    assert outcome.detail == "the artifact changed state"  # deleted by the first


# ------------------------------------------------------ 5. removal's return value


def test_remove_reference_returns_what_the_remover_returned(session: Session) -> None:
    ref = stored(session, "removed")
    owner = InMemoryOwner()
    memory = ref.for_memory()
    journal = session.journal
    journal.publish_reference(
        claim_of(ref), owner.publisher(memory, "tx"), transaction_id="tx"
    )
    receipt = {"deleted": "tx"}

    def remover() -> dict[str, str]:
        owner.remove("tx")
        return receipt

    assert journal.remove_reference("tx", remover) is receipt
    (state,) = journal.recover().states  # the lease's state, from the journal
    assert state.current_phase is Phase.RELEASED
    assert journal.current_claims() == ()
