"""Owner reconciliation with every shipped owner: S5.2 to S5.4, and crashes."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.owners.postgres_owner import PostgresOwner
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.session import ArtifactRetentionJournal, Session, open_session
from spillvault.domain.enums import ArtifactLeasePhase, ArtifactReconciliationStatus
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.values import ArtifactMemoryReference, ArtifactRetentionClaim

from support import workers
from support.fakes import FakeClock
from support.leases import T0
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from spillvault.domain.ports import ArtifactReferenceOwner

Status = ArtifactReconciliationStatus
OWNERS = ["memory", "sqlite", "postgres"]


@pytest.fixture
def session(session_dir: Path) -> Iterator[Session]:
    with open_session(session_dir, clock=FakeClock(T0)) as opened:
        yield opened


@pytest.fixture
def make_owner(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[str], ArtifactReferenceOwner]:
    def make(kind: str) -> ArtifactReferenceOwner:
        if kind == "memory":
            return InMemoryOwner()
        if kind == "sqlite":
            return SQLiteOwner(str(tmp_path / "owner.sqlite3"))
        dsn = request.getfixturevalue("postgres_dsn")
        return PostgresOwner(dsn, schema=f"owner_{abs(hash(request.node.nodeid))}")

    return make


def reference(
    session: Session, text: str = "evidence\n" * 4000
) -> ArtifactMemoryReference:
    """Store an artifact; return the reference a memory system would keep."""
    stored = session.externalizer.externalize(text, "pytest").artifact
    return stored.for_memory()


def claim_of(ref: ArtifactMemoryReference) -> ArtifactRetentionClaim:
    return ArtifactRetentionClaim.from_memory_reference(ref)


def prepared(
    session: Session, ref: ArtifactMemoryReference, tx: str = "tx"
) -> ArtifactRetentionJournal:
    journal = session.journal
    journal.prepare(claim_of(ref), transaction_id=tx, prepared_at=T0)
    return journal


def lease_events(session: Session, tx: str) -> list[str]:
    lease_id = session.store.get_lease(tx).id
    return [
        note.topic.rsplit(".", 1)[1]
        for note in session.store.notifications()
        if note.originator_id == lease_id
    ]


def generation(owner: ArtifactReferenceOwner, session: Session, tx: str) -> int:
    with owner.inspect_fenced(session.store.get_lease(tx).transaction) as fence:
        return fence.observation.generation


# the S5.2 table, every owner --------------------------------------------------------


@pytest.mark.parametrize("kind", OWNERS)
def test_published_with_matching_identity_commits_inside_the_fence(
    session: Session, make_owner: Callable[[str], ArtifactReferenceOwner], kind: str
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    journal = prepared(session, ref)
    owner.publish("tx", ref)
    report = journal.reconcile_reference("tx", owner)
    assert (report.status, report.reason) == (
        Status.COMMITTED,
        "owner_confirmed_reference",
    )
    assert report.observed_generation == generation(owner, session, "tx")
    assert session.store.get_lease("tx").phase is ArtifactLeasePhase.COMMITTED
    again = journal.reconcile_reference("tx", owner)
    assert again.status is Status.ALREADY_COMMITTED


@pytest.mark.parametrize("kind", OWNERS)
def test_published_with_another_identity_is_a_conflict_and_keeps_protecting(
    session: Session, make_owner: Callable[[str], ArtifactReferenceOwner], kind: str
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    other = reference(session, "other evidence\n" * 3000)
    journal = prepared(session, ref)
    owner.publish("tx", other)
    report = journal.reconcile_reference("tx", owner)
    assert report.status is Status.PENDING_CONFLICT
    assert journal.recover(now=T0 + timedelta(days=999)).pending_transaction_ids == (
        "tx",
    )
    assert lease_events(session, "tx") == ["Prepared"]


@pytest.mark.parametrize("kind", OWNERS)
def test_an_unsealed_absence_is_sealed_before_aborted_and_late_writes_bounce(
    session: Session,
    make_owner: Callable[[str], ArtifactReferenceOwner],
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    journal = prepared(session, ref)
    steps: list[str] = []
    monkeypatch.setattr(
        ArtifactRetentionJournal, "_checkpoint", lambda _s, n: steps.append(n)
    )
    before = generation(owner, session, "tx")
    report = journal.reconcile_reference("tx", owner)
    assert (report.status, report.reason) == (Status.ABORTED, "owner_sealed_absence")
    assert steps == ["after_owner_absence_sealed", "after_aborted"]  # S5.3
    assert report.observed_generation == before + 1
    with pytest.raises(ArtifactPublicationRejected):
        owner.publish("tx", ref)  # the tombstone refuses the zombie write forever
    assert journal.reconcile_reference("tx", owner).status is Status.ALREADY_ABORTED


@pytest.mark.parametrize("kind", OWNERS)
def test_an_already_sealed_absence_aborts_without_a_second_seal(
    session: Session, make_owner: Callable[[str], ArtifactReferenceOwner], kind: str
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    journal = prepared(session, ref)
    with owner.inspect_fenced(session.store.get_lease("tx").transaction) as fence:
        sealed = fence.seal_absent()
    report = journal.reconcile_reference("tx", owner)
    assert (report.status, report.reason) == (Status.ABORTED, "owner_sealed_absence")
    assert report.observed_generation == sealed.generation
    assert generation(owner, session, "tx") == sealed.generation


def test_unknown_and_stale_answers_leave_the_lease_prepared(session: Session) -> None:
    owner = InMemoryOwner(unknown_for={"u"}, move_generation_for={"s"})
    ref = reference(session)
    journal = prepared(session, ref, "u")
    journal.prepare(claim_of(ref), transaction_id="s", prepared_at=T0)
    assert journal.reconcile_reference("u", owner).status is Status.PENDING_UNKNOWN
    assert journal.reconcile_reference("s", owner).status is Status.PENDING_STALE
    assert journal.recover().pending_transaction_ids == ("s", "u")
    owner.move_generation_for.clear()
    assert journal.reconcile_reference("s", owner).status is Status.ABORTED


def test_young_leases_are_skipped_and_the_pending_snapshot_is_oldest_first(
    session: Session,
) -> None:
    owner = InMemoryOwner()
    ref = reference(session)
    journal = session.journal
    journal.prepare(claim_of(ref), transaction_id="old", prepared_at=T0)
    journal.prepare(
        claim_of(ref), transaction_id="young", prepared_at=T0 + timedelta(minutes=9)
    )
    reports = journal.reconcile_pending(
        owner, resolved_at=T0 + timedelta(minutes=10), min_age=timedelta(minutes=5)
    )
    assert [(r.transaction_id, r.status) for r in reports] == [
        ("old", Status.ABORTED),
        ("young", Status.SKIPPED_YOUNG),
    ]
    assert [set(r.to_dict()) for r in reports] == [
        {"transaction_id", "status", "reason", "observed_generation"}
    ] * 2


@pytest.mark.parametrize("kind", OWNERS)
def test_releases_follow_the_owner_absent_published_unknown(
    session: Session, make_owner: Callable[[str], ArtifactReferenceOwner], kind: str
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    journal = session.journal
    for tx in ("gone", "kept"):
        journal.publish_reference(
            claim_of(ref), owner.publisher(ref, tx), transaction_id=tx
        )
    owner.remove("gone")  # a removal that crashed before RELEASED
    reports = {r.transaction_id: r for r in journal.reconcile_releases(owner)}
    assert reports["gone"].status is Status.RELEASED
    assert reports["kept"].status is Status.STILL_PUBLISHED
    assert session.store.get_lease("gone").phase is ArtifactLeasePhase.RELEASED
    assert journal.current_claims()[0].reference_count == 1


# publisher failures before and after the owner's write (S4.6) ---------------------


@pytest.mark.parametrize(
    "error",
    [TimeoutError, ConnectionError, OSError, RuntimeError],
    ids=lambda e: e.__name__,
)
@pytest.mark.parametrize("written", [False, True], ids=["before_write", "after_write"])
def test_publisher_errors_stay_prepared_and_reconcile_to_what_the_owner_holds(
    session: Session, error: type[Exception], *, written: bool
) -> None:
    owner = InMemoryOwner()
    ref = reference(session)
    claim = ArtifactRetentionClaim(
        ref.source.source_id, ref.content_sha256, retain_until=T0 - timedelta(days=1)
    )

    def publisher() -> None:
        if written:
            owner.publish("tx", ref)  # the write lands; only the reply is lost
        raise error("the reply never came")

    with pytest.raises(error):
        session.journal.publish_reference(claim, publisher, transaction_id="tx")
    far = T0 + timedelta(days=3650)
    recovery = session.journal.recover(now=far)
    assert recovery.pending_transaction_ids == ("tx",)
    assert [(c.source_id, c.retain_until) for c in recovery.claims] == [
        (claim.source_id, None)  # protects with no expiry, whatever retain_until said
    ]
    assert session.journal.current_claims(now=far) == recovery.claims
    (report,) = session.journal.reconcile_pending(owner)
    assert report.status is (Status.COMMITTED if written else Status.ABORTED)


def test_a_rejection_tombstones_and_aborts(session: Session) -> None:
    owner = InMemoryOwner(reject_publish_for={"tx"})
    ref = reference(session)
    with pytest.raises(ArtifactPublicationRejected):
        session.journal.publish_reference(
            claim_of(ref), owner.publisher(ref, "tx"), transaction_id="tx"
        )
    assert session.store.get_lease("tx").phase is ArtifactLeasePhase.ABORTED
    with owner.inspect_fenced(session.store.get_lease("tx").transaction) as fence:
        assert fence.observation.absence_sealed


# concurrency (S5.4) -----------------------------------------------------------------


def test_concurrent_reconciling_threads_record_one_terminal_event(
    session: Session, tmp_path: Path
) -> None:
    owner = SQLiteOwner(str(tmp_path / "owner.sqlite3"))
    ref = reference(session)
    journal = prepared(session, ref)
    start = threading.Barrier(6)
    statuses: list[Status] = []

    def reconcile() -> None:
        start.wait()
        statuses.append(journal.reconcile_reference("tx", owner).status)

    threads = [threading.Thread(target=reconcile) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == sorted([Status.ABORTED] + [Status.ALREADY_ABORTED] * 5)
    assert lease_events(session, "tx") == ["Prepared", "Aborted"]


def test_concurrent_reconciling_processes_record_one_terminal_event(
    session_dir: Path, tmp_path: Path
) -> None:
    owner_path = str(tmp_path / "owner.sqlite3")
    with open_session(session_dir) as session:
        ref = reference(session)
        SQLiteOwner(owner_path).publish("tx", ref)
        prepared(session, ref)
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    children = [
        context.Process(
            target=workers.reconcile_with_sqlite_owner,
            args=(str(session_dir), owner_path, "tx", start, results),
        )
        for _ in range(4)
    ]
    for child in children:
        child.start()
    start.set()
    for child in children:
        child.join(timeout=120)
        assert child.exitcode == 0
    statuses = sorted(results.get(timeout=HANG_GUARD_SECONDS) for _ in children)
    assert statuses == sorted(["committed"] + ["already_committed"] * 3)
    with open_session(session_dir) as session:
        assert lease_events(session, "tx") == ["Prepared", "Committed"]


# a reconciler deciding between the owner's call and the flow's own event (S5.4) ------
# The race is made deterministic by running the other reconciler, on a session
# object of its own, from inside the publisher or remover.


@pytest.mark.parametrize("kind", OWNERS)
def test_a_reconciler_releasing_during_a_removal_leaves_the_removal_idempotent(
    session: Session,
    session_dir: Path,
    make_owner: Callable[[str], ArtifactReferenceOwner],
    kind: str,
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    journal = session.journal
    journal.publish_reference(
        claim_of(ref), owner.publisher(ref, "tx"), transaction_id="tx"
    )
    seen: list[Status] = []

    def remover() -> None:
        owner.remove("tx")
        with open_session(session_dir) as other:
            seen.extend(r.status for r in other.journal.reconcile_releases(owner))

    assert journal.remove_reference("tx", remover) is None  # what remover returned
    assert seen == [Status.RELEASED]
    (state,) = journal.recover().states
    assert state.current_phase is ArtifactLeasePhase.RELEASED
    assert lease_events(session, "tx") == ["Prepared", "Committed", "Released"]
    assert journal.current_claims() == ()
    assert journal.verify().records == 3


@pytest.mark.parametrize("kind", OWNERS)
def test_a_reconciler_committing_during_a_publication_leaves_it_committed_once(
    session: Session,
    session_dir: Path,
    make_owner: Callable[[str], ArtifactReferenceOwner],
    kind: str,
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    seen: list[Status] = []

    def publisher() -> str:
        owner.publish("tx", ref)
        with open_session(session_dir) as other:
            seen.extend(r.status for r in other.journal.reconcile_pending(owner))
        return "receipt"

    transaction, value = session.journal.publish_reference(
        claim_of(ref), publisher, transaction_id="tx"
    )
    assert (transaction.transaction_id, value) == ("tx", "receipt")
    assert seen == [Status.COMMITTED]
    assert lease_events(session, "tx") == ["Prepared", "Committed"]
    assert session.journal.verify().records == 2


@pytest.mark.parametrize("kind", OWNERS)
def test_a_reconciler_aborting_during_a_rejected_publication_keeps_the_rejection(
    session: Session,
    session_dir: Path,
    make_owner: Callable[[str], ArtifactReferenceOwner],
    kind: str,
) -> None:
    owner = make_owner(kind)
    ref = reference(session)
    seen: list[Status] = []

    def publisher() -> None:
        # The reconciler seals the absence first, so the write bounces (S5.3).
        with open_session(session_dir) as other:
            seen.extend(r.status for r in other.journal.reconcile_pending(owner))
        owner.publish("tx", ref)

    with pytest.raises(ArtifactPublicationRejected):
        session.journal.publish_reference(claim_of(ref), publisher, transaction_id="tx")
    assert seen == [Status.ABORTED]
    assert lease_events(session, "tx") == ["Prepared", "Aborted"]
    assert session.journal.verify().records == 2


def test_a_store_failure_while_releasing_is_not_reported_as_already_decided(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = InMemoryOwner()
    ref = reference(session)
    journal = session.journal
    journal.publish_reference(
        claim_of(ref), owner.publisher(ref, "tx"), transaction_id="tx"
    )
    owner.remove("tx")

    def failing(transaction_id: str, at: object) -> None:
        msg = "event store failure: connection lost"
        raise ArtifactLeaseJournalError(msg)

    monkeypatch.setattr(session.store, "release_lease", failing)
    with pytest.raises(ArtifactLeaseJournalError, match="connection lost"):
        journal.reconcile_releases(owner)
    with pytest.raises(ArtifactLeaseJournalError, match="connection lost"):
        journal.remove_reference("tx", lambda: None)
    monkeypatch.undo()
    assert session.store.get_lease("tx").phase is ArtifactLeasePhase.COMMITTED
    (report,) = journal.reconcile_releases(owner)
    assert report.status is Status.RELEASED


# crashes at each checkpoint, then a fresh process reconciles --------------------------

CRASHING_CHILD = textwrap.dedent(
    """
    import os, sys
    from spillvault.adapters.session import ArtifactRetentionJournal
    from spillvault.adapters.session import open_session
    from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
    from spillvault.domain.values import ArtifactRetentionClaim

    session_dir, owner_path, crash_at, step = sys.argv[1:5]

    def checkpoint(self, name):
        if name == crash_at:
            os._exit(17)

    ArtifactRetentionJournal._checkpoint = checkpoint
    owner = SQLiteOwner(owner_path)
    with open_session(session_dir) as session:
        journal = session.journal
        if step == "publish":
            ref = session.externalizer.externalize("x\\n" * 40000, "bash").artifact
            memory = ref.for_memory()
            claim = ArtifactRetentionClaim.from_memory_reference(memory)
            publisher = owner.publisher(memory, "tx")
            journal.publish_reference(claim, publisher, transaction_id="tx")
            journal.remove_reference("tx", owner.remover("tx"))
        else:
            journal.reconcile_pending(owner)
    """
)


def crash_child(
    session_dir: Path, tmp_path: Path, crash_at: str, step: str
) -> SQLiteOwner:
    """Run CRASHING_CHILD until it dies at `crash_at`; return the owner it used."""
    owner_path = str(tmp_path / "owner.sqlite3")
    script = [sys.executable, "-c", CRASHING_CHILD, str(session_dir), owner_path]
    child = subprocess.run(
        [*script, crash_at, step], check=False, capture_output=True, timeout=120
    )
    assert child.returncode == 17, child.stderr.decode()
    return SQLiteOwner(owner_path)


@pytest.mark.parametrize(
    ("crash_at", "final"),
    [
        ("after_prepared", ArtifactLeasePhase.ABORTED),  # the owner never got it
        ("after_committed", ArtifactLeasePhase.RELEASED),  # the child never removed it
        ("after_released", ArtifactLeasePhase.RELEASED),
    ],
)
def test_a_crash_at_each_publication_checkpoint_reconciles_in_a_fresh_process(
    session_dir: Path, tmp_path: Path, crash_at: str, final: ArtifactLeasePhase
) -> None:
    owner = crash_child(session_dir, tmp_path, crash_at, "publish")
    with open_session(session_dir) as session:
        journal = session.journal
        journal.reconcile_pending(owner, min_age=0)
        lease = session.store.get_lease("tx")
        if (
            lease.phase is ArtifactLeasePhase.COMMITTED
            and final is ArtifactLeasePhase.RELEASED
        ):
            journal.remove_reference("tx", owner.remover("tx"))
        assert session.store.get_lease("tx").phase is final
        assert journal.verify().records == len(
            session.store.get_lease("tx").phase_history
        )


@pytest.mark.parametrize("crash_at", ["after_owner_absence_sealed", "after_aborted"])
def test_a_crash_inside_reconciliation_finishes_on_the_next_run(
    session_dir: Path, tmp_path: Path, crash_at: str
) -> None:
    with open_session(session_dir) as session:
        ref = reference(session)
        prepared(session, ref)  # the owner never got the reference
    owner = crash_child(session_dir, tmp_path, crash_at, "reconcile")
    with open_session(session_dir) as session:
        # Sealed (and maybe aborted) by the dead child: the lease still protects
        # until ABORTED is recorded, and the next run records it exactly once.
        reports = session.journal.reconcile_pending(owner)
        expected = [] if crash_at == "after_aborted" else [Status.ABORTED]
        assert [r.status for r in reports] == expected
        assert lease_events(session, "tx") == ["Prepared", "Aborted"]


# operators and the CLI -------------------------------------------------------------


def test_cli_reconcile_and_resolve(
    session_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    owner_path = str(tmp_path / "owner.sqlite3")
    owner = SQLiteOwner(owner_path)
    with open_session(session_dir) as session:
        ref = reference(session)
        other = reference(session, "other\n" * 9000)
        journal = session.journal
        for tx in ("fine", "conflict", "absent"):
            journal.prepare(claim_of(ref), transaction_id=tx)
        owner.publish("fine", ref)
        owner.publish("conflict", other)
    # A mistyped owner path is refused, never created: an empty owner would
    # answer ABSENT for everything and abort every pending lease.
    wrong = ["--session", str(session_dir), "--owner", f"sqlite:{owner_path}x"]
    assert cli_main(["reconcile", *wrong, "--min-age", "0s"]) == 3
    assert "no SQLite owner database" in capsys.readouterr().err
    assert not os.path.exists(f"{owner_path}x")
    base = ["--session", str(session_dir), "--owner", f"sqlite:{owner_path}"]
    assert cli_main(["reconcile", *base, "--min-age", "0s", "--json"]) == 0
    reports = [
        (r["transaction_id"], r["status"]) for r in json.loads(capsys.readouterr().out)
    ]
    assert sorted(reports[:3]) == [
        ("absent", "aborted"),
        ("conflict", "pending_conflict"),
        ("fine", "committed"),
    ]
    assert reports[3:] == [("fine", "still_published")]  # then the releases pass
    assert (
        cli_main(["lease", "resolve", "conflict", *base, "--commit", "--reason", "x"])
        == 3
    )
    assert "does not hold" in capsys.readouterr().err
    code = cli_main(
        ["lease", "resolve", "conflict", *base, "--abort", "--reason", "checked"]
    )
    assert code == 3  # a published reference cannot be sealed: refused
    owner.remove("conflict")
    assert (
        cli_main(["lease", "resolve", "conflict", *base, "--abort", "--reason", "ok"])
        == 0
    )
    assert "aborted" in capsys.readouterr().out
    with open_session(session_dir) as session:
        assert session.journal.recover().pending_transaction_ids == ()
        assert session.store.get_lease("conflict").phase is ArtifactLeasePhase.ABORTED


@pytest.mark.parametrize(
    "min_age", [float("nan"), float("inf"), -1, -0.5, 10**30, timedelta(days=-1)]
)
def test_a_min_age_that_means_nothing_is_refused_by_name(
    session_dir: Path, min_age: object
) -> None:
    with open_session(session_dir) as session:
        with pytest.raises(ArtifactRetentionError, match="min_age"):
            session.journal.reconcile_pending(InMemoryOwner(), min_age=min_age)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="min_age"):
            session.journal.reconcile_pending(InMemoryOwner(), min_age=True)
