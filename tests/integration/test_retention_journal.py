"""ArtifactRetentionJournal: prepare, publish, remove, recover, the journal (S4)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.services import lease_projection
from spillvault.adapters.session import ArtifactRetentionJournal, Session, open_session
from spillvault.adapters.storage.journal_file import JournalFile
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactMissingError,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.journal_records import JournalChain, decode_line
from spillvault.domain.machines import LEASE_MACHINE
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
)

from support import workers
from support.fakes import FakeClock
from support.leases import T0, claim_for
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


@pytest.fixture
def session(session_dir: Path) -> Iterator[Session]:
    with open_session(session_dir, clock=FakeClock(T0)) as opened:
        yield opened


def stored_claim(
    session: Session, text: str = "evidence\n" * 5000
) -> ArtifactRetentionClaim:
    """Store an artifact and return the claim a memory owner would make for it."""
    artifact = session.externalizer.externalize(text, "bash").artifact
    return ArtifactRetentionClaim(artifact.source.source_id, artifact.content_sha256)


def journal_lines(session_dir: Path) -> list[bytes]:
    return (session_dir / RETENTION_JOURNAL_NAME).read_bytes().splitlines(keepends=True)


def assert_chain_intact(session_dir: Path, session_id: str) -> list[dict[str, object]]:
    chain = JournalChain(session_id=session_id, phases={})
    records = [
        chain.accept(decode_line(line, chain.next_line))
        for line in journal_lines(session_dir)
    ]
    return [record.body() for record in records]


def raising(error: BaseException) -> Callable[[], object]:
    def publisher() -> object:
        raise error

    return publisher


# publication (S4.6) -----------------------------------------------------------


def test_publish_records_prepared_then_committed_in_store_and_journal(
    session: Session, session_dir: Path
) -> None:
    claim = stored_claim(session)
    calls: list[int] = []

    def publisher() -> str:
        # The journal holds PREPARED before the owner is called (S4.5).
        calls.append(len(journal_lines(session_dir)))
        return "stored-ref"

    transaction, value = session.journal.publish_reference(
        claim, publisher, transaction_id="tx-1"
    )
    assert (transaction.transaction_id, value) == ("tx-1", "stored-ref")
    assert calls == [1]
    bodies = assert_chain_intact(session_dir, session.session_id)
    assert [b["phase"] for b in bodies] == ["prepared", "committed"]
    assert bodies[0]["claim"] == claim.to_dict()
    assert session.store.get_lease("tx-1").phase is ArtifactLeasePhase.COMMITTED
    assert session.journal.current_claims() == (claim,)


def test_the_checkpoint_after_prepared_fires_after_the_journal_append(
    session: Session, session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = stored_claim(session)
    seen: list[tuple[str, int]] = []
    monkeypatch.setattr(
        ArtifactRetentionJournal,
        "_checkpoint",
        lambda _self, name: seen.append((name, len(journal_lines(session_dir)))),
    )
    session.journal.publish_reference(claim, lambda: None, transaction_id="tx")
    assert seen == [("after_prepared", 1), ("after_committed", 2)]


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError("lost"),
        ConnectionError("reset"),
        OSError(5, "EIO"),
        RuntimeError("?"),
    ],
)
def test_only_a_rejection_aborts_every_other_error_leaves_prepared(
    session: Session, error: BaseException
) -> None:
    claim = ArtifactRetentionClaim(
        stored_claim(session).source_id,
        stored_claim(session).content_sha256,
        retain_until=T0 - timedelta(days=1),  # long past: PREPARED ignores it (S4.7)
    )
    with pytest.raises(type(error)):
        session.journal.publish_reference(claim, raising(error), transaction_id="tx")
    recovery = session.journal.recover(now=T0 + timedelta(days=3650))
    assert recovery.pending_transaction_ids == ("tx",)
    assert [c.source_id for c in recovery.claims] == [claim.source_id]
    assert recovery.claims[0].retain_until is None

    with pytest.raises(ArtifactPublicationRejected):
        session.journal.publish_reference(
            claim, raising(ArtifactPublicationRejected("no")), transaction_id="tx-2"
        )
    assert session.store.get_lease("tx-2").phase is ArtifactLeasePhase.ABORTED
    assert session.journal.recover().pending_transaction_ids == ("tx",)


def test_a_transaction_id_is_used_once_in_any_phase(session: Session) -> None:
    claim = stored_claim(session)
    session.journal.publish_reference(claim, lambda: None, transaction_id="once")
    calls: list[str] = []
    with pytest.raises(ArtifactLeaseJournalError, match="already used"):
        session.journal.publish_reference(
            claim, lambda: calls.append("x"), transaction_id="once"
        )
    assert calls == []  # COMMITTED never calls the publisher again (S4.8)


def test_a_used_id_is_refused_as_used_whatever_its_artifact_s_state(
    session: Session, session_dir: Path
) -> None:
    claim = stored_claim(session)
    session.journal.prepare(claim, transaction_id="once")
    (session_dir / "tool-results" / "tool_result_001.txt").unlink()
    with pytest.raises(ArtifactMissingError):
        session.journal.prepare(claim, transaction_id="new")
    with pytest.raises(ArtifactLeaseJournalError, match="already used: 'once'"):
        session.journal.prepare(claim, transaction_id="once")


@pytest.mark.parametrize("decided", ["commit", "abort"])
def test_a_reconciler_deciding_during_the_publisher_call_wins_the_race(
    session_dir: Path, decided: str
) -> None:
    with (
        open_session(session_dir, clock=FakeClock(T0)) as session,
        open_session(session_dir, clock=FakeClock(T0)) as reconciler,
    ):
        claim = stored_claim(session)

        def publisher() -> str:
            # Another process records the outcome while no lock is held (S5.4).
            getattr(reconciler.journal, decided)("tx")
            return "published"

        if decided == "commit":
            _, value = session.journal.publish_reference(
                claim, publisher, transaction_id="tx"
            )
            assert value == "published"
        else:
            with pytest.raises(ArtifactLeaseJournalError, match="aborted"):
                session.journal.publish_reference(claim, publisher, transaction_id="tx")
        (state,) = session.journal.recover().states
        assert state.phases == (
            ArtifactLeasePhase.PREPARED,
            LEASE_MACHINE.state_after(decided),
        )
        assert session.journal.verify().records == 2


def test_publication_is_refused_for_unknown_changed_or_gone_artifacts(
    session: Session, session_dir: Path
) -> None:
    claim = stored_claim(session)
    unknown = claim_for(session.session_id, number=7)
    with pytest.raises(ArtifactLeaseJournalError, match="unknown"):
        session.journal.prepare(unknown)
    path = session_dir / "tool-results" / "tool_result_001.txt"
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ArtifactLeaseJournalError, match="changed on disk"):
        session.journal.prepare(claim)
    path.unlink()
    with pytest.raises(ArtifactRetentionError, match="missing artifact") as gone:
        session.journal.prepare(claim)
    assert isinstance(gone.value, ArtifactLeaseJournalError)  # refused publication
    assert session.journal.recover().states == ()
    assert not (session_dir / RETENTION_JOURNAL_NAME).exists()


def test_publishing_an_artifact_gc_deleted_is_a_missing_artifact(
    session: Session,
) -> None:
    """The seed's contract: a retention error that says "missing artifact"."""
    claim = stored_claim(session)
    report = session.externalizer.cleanup_artifacts_from_journal(
        session.journal,
        policy=ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False),
        # GC ages by the file's mtime, which the kernel stamped: its own clock.
        now=datetime.now(UTC) + timedelta(days=2),
    )
    assert report.counts == {"deleted": 1}
    with pytest.raises(ArtifactMissingError, match=r"missing artifact .*deleted") as g:
        session.journal.publish_reference(claim, lambda: None, transaction_id="late")
    assert isinstance(g.value, ArtifactRetentionError)
    assert session.store.find_lease("late") is None


def test_a_claim_of_another_session_is_a_retention_error(session: Session) -> None:
    with pytest.raises(ArtifactRetentionError, match="different artifact session"):
        session.journal.prepare(claim_for("other-session"))


# removal (S4.9) ---------------------------------------------------------------


def test_removal_deletes_at_the_owner_first_and_keeps_protecting_on_failure(
    session: Session,
) -> None:
    claim = stored_claim(session)
    session.journal.publish_reference(claim, lambda: None, transaction_id="tx")
    with pytest.raises(ConnectionError):
        session.journal.remove_reference("tx", raising(ConnectionError("down")))
    assert session.journal.current_claims() == (claim,)
    assert session.journal.remove_reference("tx", lambda: "removed") == "removed"
    (state,) = session.journal.recover().states
    assert state.phases == (
        ArtifactLeasePhase.PREPARED,
        ArtifactLeasePhase.COMMITTED,
        ArtifactLeasePhase.RELEASED,
    )
    assert session.journal.current_claims() == ()
    with pytest.raises(ArtifactLeaseJournalError, match="not committed"):
        session.journal.remove_reference("tx", lambda: None)


# claims (S4.2, S4.3) -------------------------------------------------------------


def test_claims_are_aggregated_per_artifact_across_pending_and_committed(
    session: Session,
) -> None:
    claim = stored_claim(session)
    later = T0 + timedelta(days=2)
    bounded = ArtifactRetentionClaim(
        claim.source_id, claim.content_sha256, reference_count=3, retain_until=later
    )
    session.journal.publish_reference(bounded, lambda: None, transaction_id="a")
    session.journal.publish_reference(claim, lambda: None, transaction_id="b")
    session.journal.prepare(bounded, transaction_id="c")
    (total,) = session.journal.current_claims(now=T0)
    assert total.reference_count == 3 + 1 + 3
    assert total.retain_until is None  # b and the prepared c have no bound
    session.journal.remove_reference("b", lambda: None)
    session.journal.abort("c")
    (left,) = session.journal.current_claims(now=T0)
    assert (left.reference_count, left.retain_until) == (3, later)
    assert session.journal.current_claims(now=later) == ()


# the incremental view (S8.1) ------------------------------------------------------


def test_reopening_reads_only_events_after_the_saved_view(
    session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_projection, "SAVE_EVERY", 50)
    with open_session(session_dir) as session:
        claim = stored_claim(session)
        for i in range(120):
            session.journal.publish_reference(
                claim, lambda: None, transaction_id=f"t{i}"
            )
        before = session.journal.current_claims()
    read: list[int] = []
    real = lease_projection.LeaseProjection._new_lease_events

    def counting(self: lease_projection.LeaseProjection) -> Iterator[object]:
        for item in real(self):
            read.append(1)
            yield item

    monkeypatch.setattr(lease_projection.LeaseProjection, "_new_lease_events", counting)
    with open_session(session_dir) as session:
        assert session.journal.current_claims() == before
        assert before[0].reference_count == 120
    assert len(read) == 0  # everything was in the view saved at close


# the journal (J1-J8) --------------------------------------------------------------


def test_a_short_journal_is_caught_up_on_open(session_dir: Path) -> None:
    with open_session(session_dir) as session:
        claim = stored_claim(session)
        session.journal.publish_reference(claim, lambda: None, transaction_id="a")
        # a crash between a store commit and its append: the event is stored only
        session.store.prepare_lease(ArtifactLeaseTransaction("b", claim, T0))
        session_id = session.session_id
    assert len(journal_lines(session_dir)) == 2
    with open_session(session_dir):
        pass
    bodies = assert_chain_intact(session_dir, session_id)
    assert [(b["transaction_id"], b["phase"]) for b in bodies] == [
        ("a", "prepared"),
        ("a", "committed"),
        ("b", "prepared"),
    ]


def test_a_torn_tail_is_set_aside_and_the_next_append_lands_cleanly(
    session_dir: Path,
) -> None:
    with open_session(session_dir) as session:
        claim = stored_claim(session)
        session.journal.publish_reference(claim, lambda: None, transaction_id="a")
    journal = session_dir / RETENTION_JOURNAL_NAME
    size = journal.stat().st_size
    with journal.open("ab") as file:
        file.write(b'{"at":"2026')  # a torn append
    with open_session(session_dir) as session:
        session.journal.publish_reference(claim, lambda: None, transaction_id="b")
        assert session.journal.verify().records == 4
        session_id = session.session_id
    assert (
        session_dir / f"{RETENTION_JOURNAL_NAME}.torn-{size}"
    ).read_bytes() == b'{"at":"2026'
    assert len(assert_chain_intact(session_dir, session_id)) == 4


def test_damage_after_the_checkpoint_is_refused_on_open_and_repair_rebuilds(
    session_dir: Path,
) -> None:
    with open_session(session_dir) as session:
        claim = stored_claim(session)
        session.journal.publish_reference(claim, lambda: None, transaction_id="a")
        session.journal.publish_reference(claim, lambda: None, transaction_id="b")
        session_id = session.session_id
    journal = session_dir / RETENTION_JOURNAL_NAME
    good = journal.read_bytes()
    damaged = good.replace(b'"transaction_id":"b"', b'"transaction_id":"c"')
    journal.write_bytes(damaged)
    with pytest.raises(ArtifactLeaseJournalError, match="line"):
        open_session(session_dir)
    with open_session(session_dir, recover=False) as session:
        report, kept = session.journal.repair()
    assert report.records == 4
    assert journal.read_bytes() == good  # rebuilt byte for byte from the store (J2)
    assert (session_dir / kept).read_bytes() == damaged
    with open_session(session_dir) as session:
        assert session.journal.verify().records == 4
    assert len(assert_chain_intact(session_dir, session_id)) == 4


def test_damage_before_the_checkpoint_is_found_by_a_whole_verify(
    session_dir: Path,
) -> None:
    with open_session(session_dir) as session:
        claim = stored_claim(session)
        for tx in ("a", "b", "c"):
            session.journal.publish_reference(claim, lambda: None, transaction_id=tx)
    journal = session_dir / RETENTION_JOURNAL_NAME
    lines = journal.read_bytes().splitlines(keepends=True)
    lines[0] = lines[0].replace(b"+00:00", b"+00:01", 1)
    journal.write_bytes(b"".join(lines))
    # Opening verifies from the checkpoint (S4.5): line 1 lies before it.
    with (
        open_session(session_dir) as session,
        pytest.raises(ArtifactLeaseJournalError, match="at line 1"),
    ):
        session.journal.verify()


def test_six_processes_preparing_at_once_keep_one_gap_free_chain(
    session_dir: Path,
) -> None:
    with open_session(session_dir) as session:
        claim = stored_claim(session)
        session_id = session.session_id
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    children = [
        context.Process(
            target=workers.publish_many,
            args=(str(session_dir), claim.to_dict(), f"p{i}", 5, start, results),
        )
        for i in range(6)
    ]
    for child in children:
        child.start()
    start.set()
    for child in children:
        child.join(timeout=120)
        assert child.exitcode == 0
    assert sorted(results.get(timeout=HANG_GUARD_SECONDS) for _ in children) == [
        f"p{i}" for i in range(6)
    ]
    bodies = assert_chain_intact(session_dir, session_id)
    assert [b["sequence"] for b in bodies] == list(range(1, 61))
    committed = {b["transaction_id"] for b in bodies if b["phase"] == "committed"}
    assert committed == {f"p{i}-{n}" for i in range(6) for n in range(5)}
    with open_session(session_dir) as session:
        assert session.journal.verify().records == 60
        assert session.journal.current_claims()[0].reference_count == 30


@pytest.mark.parametrize("victim", ["events.sqlite3", "session.json"])
def test_removing_the_store_or_marker_of_a_session_with_leases_is_refused(
    session_dir: Path, victim: str
) -> None:
    with open_session(session_dir) as session:
        session.journal.publish_reference(stored_claim(session), lambda: None)
    (session_dir / victim).unlink()
    with pytest.raises(ArtifactLeaseJournalError):
        open_session(session_dir)


def test_cli_journal_verify_and_repair(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_session(session_dir) as session:
        session.journal.publish_reference(stored_claim(session), lambda: None)
    base = ["--session", str(session_dir)]
    assert cli_main(["journal", "verify", *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "ok": True,
        "records": 2,
        "end": (session_dir / RETENTION_JOURNAL_NAME).stat().st_size,
        "torn_bytes": 0,
    }
    journal = session_dir / RETENTION_JOURNAL_NAME
    journal.write_bytes(journal.read_bytes().replace(b'"sequence":2', b'"sequence":3'))
    assert cli_main(["journal", "verify", *base]) == 3
    assert "ArtifactLeaseJournalError" in capsys.readouterr().err
    assert cli_main(["journal", "repair", *base]) == 0
    assert "journal rebuilt: 2 records" in capsys.readouterr().out
    assert cli_main(["journal", "verify", *base]) == 0
    assert "journal ok: 2 records" in capsys.readouterr().out


def test_a_deleted_journal_is_refused_not_rebuilt_silently(session_dir: Path) -> None:
    with open_session(session_dir) as session:
        claim = stored_claim(session)
    # A process that dies without closing: the view it saved when it first wrote
    # the journal is all the next open knows.
    child = textwrap.dedent(
        f"""
        import os
        from spillvault.adapters.session import open_session
        from spillvault.domain.values import ArtifactRetentionClaim
        session = open_session({str(session_dir)!r})
        claim = ArtifactRetentionClaim.from_dict({claim.to_dict()!r})
        session.journal.publish_reference(claim, lambda: None)
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120)
    (session_dir / RETENTION_JOURNAL_NAME).unlink()
    with pytest.raises(ArtifactLeaseJournalError, match="shorter"):
        open_session(session_dir)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_publication_and_reopen_on_every_event_store(
    session_dir: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    store = {"memory": "memory", "sqlite": None}.get(kind)
    if kind == "postgres":
        store = request.getfixturevalue("postgres_dsn")
    with open_session(session_dir, event_store=store) as session:
        claim = stored_claim(session)
        session.journal.publish_reference(claim, lambda: None, transaction_id="a")
        session.journal.prepare(claim, transaction_id="b")
    with open_session(session_dir, event_store=store) as session:
        recovery = session.journal.recover()
        assert recovery.pending_transaction_ids == ("b",)
        assert recovery.claims[0].reference_count == 2
        assert session.journal.verify().records == 3


def test_a_failed_append_is_redone_in_order_by_the_next_sync(
    session: Session, session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = stored_claim(session)
    real = JournalFile.append_lines
    calls: list[int] = []

    def append_failing_once(self: JournalFile, lines: Any, *, expect_end: int) -> int:
        calls.append(len(lines))
        if len(calls) == 1:
            msg = (
                "journal has complete lines after offset 0 (another writer): re-read it"
            )
            raise ArtifactLeaseJournalError(msg)
        return real(self, lines, expect_end=expect_end)

    monkeypatch.setattr(JournalFile, "append_lines", append_failing_once)
    with pytest.raises(ArtifactLeaseJournalError, match="re-read"):
        session.journal.prepare(claim, transaction_id="first")
    # The first PREPARED is stored; the next sync journals it before the second.
    session.journal.prepare(claim, transaction_id="second")
    bodies = assert_chain_intact(session_dir, session.session_id)
    assert [b["transaction_id"] for b in bodies] == ["first", "second"]
    assert session.journal.verify().records == 2
    assert session.journal.recover().pending_transaction_ids == ("first", "second")
