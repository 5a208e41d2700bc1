"""The lease projection (S4.5, S8.1) on journals and views it did not write itself.

Other writers of the same session directory, an operator editing the journal,
a newer version's store and a damaged view cache: each case checks what the
projection reports, and that it never folds a journal that disagrees with the
store.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from eventsourcing.utils import register_topic

from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import Session, open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.journal_records import decode_line, encode, make_record
from spillvault.domain.lease import Lease
from spillvault.domain.values import ArtifactLeaseTransaction, ArtifactRetentionClaim

from support.fakes import FakeClock
from support.intercept import InterceptingFS, named

if TYPE_CHECKING:
    from collections.abc import Iterator

    from spillvault.domain.journal_records import JournalRecord

    from support.intercept import Call


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def session(session_dir: Path, clock: FakeClock) -> Iterator[Session]:
    with open_session(session_dir, clock=clock) as opened:
        yield opened


def claim(session: Session, tag: str = "x") -> ArtifactRetentionClaim:
    ref = session.externalizer.externalize(f"{tag}: a long line\n" * 5000, "bash")
    return ArtifactRetentionClaim.from_memory_reference(ref.artifact.for_memory())


def prepare(session: Session, tx: str, tag: str = "x") -> None:
    session.journal.prepare(claim(session, tag), transaction_id=tx)


def journal_of(session_dir: Path) -> Path:
    return session_dir / RETENTION_JOURNAL_NAME


def lines_of(session_dir: Path) -> list[bytes]:
    return journal_of(session_dir).read_bytes().splitlines(keepends=True)


def records_of(session_dir: Path) -> list[JournalRecord]:
    return [decode_line(line, n) for n, line in enumerate(lines_of(session_dir), 1)]


def forged(record: JournalRecord, **changes: Any) -> JournalRecord:
    """A hash-valid record like `record` with `changes` (not the store's)."""
    fields = {
        "sequence": record.sequence,
        "prev": record.prev,
        "position": record.position,
        "session_id": record.session_id,
        "transaction_id": record.transaction_id,
        "phase": record.phase,
        "claim": record.claim,
        "at": record.at,
    }
    return make_record(**{**fields, **changes})


def write_lines(session_dir: Path, lines: list[bytes]) -> None:
    journal_of(session_dir).write_bytes(b"".join(lines))


def live(session: Session) -> set[str]:
    return set(session_projection(session).live_leases())


# ---------------------------------------------------------- incremental sync


def test_position_is_the_last_store_event_folded(session: Session) -> None:
    prepare(session, "tx-1")
    projection = session_projection(session)
    projection.sync()
    last = max(note.id for note in session.store.notifications(after=0))
    assert projection.position == last


def test_a_valid_line_that_is_not_the_stored_event_is_refused(
    session_dir: Path, clock: FakeClock
) -> None:
    with (
        open_session(session_dir, clock=clock) as early,
        open_session(session_dir, clock=clock) as writer,
    ):
        live(early)  # synced before any lease: its checkpoint is the start
        prepare(writer, "tx-1")
        (line,) = lines_of(session_dir)
        other = forged(decode_line(line, 1), transaction_id="tx-2")
        write_lines(session_dir, [encode(other)])
        with pytest.raises(
            ArtifactLeaseJournalError, match="does not match the stored"
        ):
            live(early)


def test_a_line_with_no_stored_event_is_refused_until_removed(
    session: Session, session_dir: Path
) -> None:
    prepare(session, "tx-1")
    (line,) = lines_of(session_dir)
    first = decode_line(line, 1)
    extra = forged(
        first, sequence=2, prev=first.sha256, position=first.position + 1000,
        transaction_id="tx-ghost",
    )  # fmt: skip
    write_lines(session_dir, [line, encode(extra)])
    with pytest.raises(ArtifactLeaseJournalError, match="line 2 has no event"):
        live(session)
    with pytest.raises(ArtifactLeaseJournalError, match="line 2 has no event"):
        live(session)  # a failed sync folds nothing: it fails again
    write_lines(session_dir, [line])  # the operator removes the stray line
    assert live(session) == {"tx-1"}
    prepare(session, "tx-3", "y")
    assert [r.transaction_id for r in records_of(session_dir)] == ["tx-1", "tx-3"]


def test_a_sync_that_fails_with_the_store_unreadable_starts_again_from_the_view(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(session, "tx-1")
    session.journal.commit("tx-1")
    store = session.store

    def unreadable(*_: object, **__: object) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    prepare(session, "tx-2", "y")
    projection = session_projection(session)
    with monkeypatch.context() as patch:
        # The store fails mid-sync, and the saved view cannot be reloaded either.
        session.journal.release("tx-1")
        patch.setattr(store, "get_session_view", unreadable)
        patch.setattr(store, "get_lease", unreadable)
        patch.setattr(store, "get_lease_by_id", unreadable)
        patch.setattr(store, "notifications", unreadable)
        with pytest.raises(sqlite3.OperationalError):
            projection.sync()
    # Readable again: the next sync starts from the saved view, folding each
    # event once.
    assert live(session) == {"tx-2"}
    report = projection.verify_whole()
    assert report.records == 4


def test_the_verified_last_line_changed_in_place_is_refused(
    session: Session, session_dir: Path
) -> None:
    prepare(session, "tx-1")
    (line,) = lines_of(session_dir)
    other = encode(forged(decode_line(line, 1), transaction_id="tx-9"))
    assert len(other) == len(line)
    write_lines(session_dir, [other])
    with pytest.raises(ArtifactLeaseJournalError, match="changed after it was"):
        live(session)


def test_a_verified_last_line_longer_than_the_look_back_is_found(
    session_dir: Path, clock: FakeClock
) -> None:
    tx = "\N{GRINNING FACE}" * 1024  # the longest transaction id, 4 bytes a char
    with open_session(session_dir, clock=clock) as session:
        prepare(session, tx)
    (line,) = lines_of(session_dir)
    assert len(line) > 4096
    with open_session(session_dir, clock=clock) as reopened:
        assert live(reopened) == {tx}  # resumed from the saved checkpoint
        prepare(reopened, "tx-2", "y")
    assert [r.transaction_id for r in records_of(session_dir)] == [tx, "tx-2"]


class Extended(Lease.Event):
    """A lease event this version does not know, as a newer version might record."""

    TOPIC = "spillvault:Lease.Extended"


register_topic(Extended.TOPIC, Extended)


def test_an_unknown_lease_event_in_the_store_is_refused(session: Session) -> None:
    prepare(session, "tx-1")
    lease = session.store.get_lease("tx-1")
    lease.trigger_event(Extended)
    session.store.save_aggregates(lease)
    with pytest.raises(ArtifactLeaseJournalError, match="unknown lease event"):
        live(session)


# ----------------------------------------------- projecting the stored events


def records_the_slow_way(session: Session) -> list[JournalRecord]:
    """Every lease event through eventsourcing's mapper and make_record."""
    records: list[JournalRecord] = []
    prev = "0" * 64
    transactions: dict[object, str] = {}
    for note in session.store.notifications(after=0):
        if not note.topic.startswith("spillvault:Lease."):
            continue
        fields = session.store.mapper.to_domain_event(note).__dict__
        phase = note.topic.removeprefix("spillvault:Lease.").lower()
        transactions.setdefault(note.originator_id, fields.get("transaction_id"))
        record = make_record(
            sequence=len(records) + 1,
            prev=prev,
            position=note.id,
            session_id=session.session_id,
            transaction_id=str(transactions[note.originator_id]),
            phase=phase,
            claim=fields.get("claim"),
            at=fields[f"{phase}_at"],
        )
        records.append(record)
        prev = record.sha256
    return records


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_the_journal_is_the_mapper_s_events_projected(
    session_dir: Path, clock: FakeClock, request: pytest.FixtureRequest, kind: str
) -> None:
    # The projection reads stored states as plain JSON, which holds while the
    # stores keep events unencrypted, uncompressed and of primitive fields.
    store = {"memory": "memory", "sqlite": None}.get(kind)
    if kind == "postgres":
        store = request.getfixturevalue("postgres_dsn")
    with open_session(session_dir, clock=clock, event_store=store) as session:
        mapper = session.store.mapper
        assert (mapper.cipher, mapper.compressor) == (None, None)
        prepare(session, "tx-1")
        prepare(session, "tx-2", "y")
        session.journal.commit("tx-1")
        session.journal.abort("tx-2")
        session.journal.release("tx-1")
        prepare(session, "tx-é\u2028", "z")
        expected = [encode(record) for record in records_the_slow_way(session)]
        assert len(expected) == 6
        assert lines_of(session_dir) == expected
        assert session.journal.verify().records == 6
        session.journal.repair()
        assert lines_of(session_dir) == expected


def test_a_stored_event_no_record_can_hold_is_refused(session: Session) -> None:
    prepare(session, "tx-1")
    lease = session.store.get_lease("tx-1")
    lease.trigger_event(Lease.Committed, committed_at="yesterday")
    session.store.save_aggregates(lease)
    message = "invalid field 'at' in a new journal record: must be ISO-8601"
    with pytest.raises(ArtifactLeaseJournalError, match=message):
        live(session)
    with pytest.raises(ArtifactLeaseJournalError, match=message):
        session_projection(session).verify_whole()
    assert len(lines_of(Path(session.path))) == 1


# -------------------------------------------------------------- whole verify


def test_verify_names_an_earlier_valid_line_that_is_not_the_store_s(
    session: Session, session_dir: Path
) -> None:
    prepare(session, "tx-1")
    prepare(session, "tx-2", "y")
    first, second = lines_of(session_dir)
    other = encode(forged(decode_line(first, 1), transaction_id="tx-9"))
    write_lines(session_dir, [other, second])  # same length: the checkpoint holds
    assert live(session) == {"tx-1", "tx-2"}  # the incremental sync cannot tell
    with pytest.raises(ArtifactLeaseJournalError, match="line 1 does not match"):
        session_projection(session).verify_whole()


def test_verify_refuses_a_journal_cut_short_while_it_reads(
    session_dir: Path, clock: FakeClock
) -> None:
    fs = InterceptingFS()
    with open_session(session_dir, fs=fs, clock=clock) as session:
        prepare(session, "tx-1")
        prepare(session, "tx-2", "y")
        first, _ = lines_of(session_dir)

        def cut_short(call: Call) -> None:
            os.truncate(journal_of(session_dir), len(first))

        # the second open of the journal: after the sync's read, before verify's own
        journal_opens = fs.before(
            "open", cut_short, when=named(RETENTION_JOURNAL_NAME), nth=2, times=1
        )
        with (
            journal_opens,
            pytest.raises(ArtifactLeaseJournalError, match="ends at line 1"),
        ):
            session_projection(session).verify_whole()
        assert journal_opens.hits >= 2


# --------------------------------------------- events this process just saved


def publish(session: Session, c: ArtifactRetentionClaim, tx: str) -> None:
    session.journal.publish_reference(c, lambda: None, transaction_id=tx)


def phases_journaled(session_dir: Path) -> list[tuple[str, str]]:
    return [(r.transaction_id, r.phase) for r in records_of(session_dir)]


def test_a_publish_journals_its_own_events_without_reading_them_back(
    session: Session, session_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = claim(session)
    publish(session, c, "tx-1")
    store = session.store

    def no_read_back(*_: object, **__: object) -> Any:
        msg = "read back from the store"
        raise AssertionError(msg)

    with monkeypatch.context() as patch:
        for name in ("notifications", "get_lease", "find_lease", "get_lease_by_id"):
            patch.setattr(store, name, no_read_back)
        publish(session, c, "tx-2")
    assert phases_journaled(session_dir) == [
        ("tx-1", "prepared"), ("tx-1", "committed"),
        ("tx-2", "prepared"), ("tx-2", "committed"),
    ]  # fmt: skip
    assert session_projection(session).verify_whole().records == 4


def test_an_event_another_writer_stored_in_between_is_read_and_journaled_first(
    session_dir: Path, clock: FakeClock
) -> None:
    with (
        open_session(session_dir, clock=clock) as first,
        open_session(session_dir, clock=clock) as second,
    ):
        c = claim(first)
        publish(first, c, "tx-1")
        # Another process stores PREPARED and dies before its journal append.
        second.store.prepare_lease(ArtifactLeaseTransaction("tx-2", c, clock.now()))
        publish(first, c, "tx-3")
        assert phases_journaled(session_dir) == [
            ("tx-1", "prepared"), ("tx-1", "committed"), ("tx-2", "prepared"),
            ("tx-3", "prepared"), ("tx-3", "committed"),
        ]  # fmt: skip
        assert live(first) == {"tx-1", "tx-2", "tx-3"}
        assert session_projection(first).verify_whole().records == 5


def test_lines_another_writer_journaled_past_this_save_are_read_from_the_store(
    session_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    with (
        open_session(session_dir, clock=clock) as first,
        open_session(session_dir, clock=clock) as second,
    ):
        c = claim(first)
        publish(first, c, "tx-1")
        real = first.store.prepare_lease

        def prepare_then_the_other_prepares(transaction: Any) -> Lease:
            lease = real(transaction)
            # Before `first` syncs, another writer stores its own PREPARED and
            # journals both: the journal runs past what `first` saved.
            second.journal.prepare(c, transaction_id="tx-other")
            return lease

        monkeypatch.setattr(
            first.store, "prepare_lease", prepare_then_the_other_prepares
        )
        publish(first, c, "tx-2")
        assert phases_journaled(session_dir) == [
            ("tx-1", "prepared"), ("tx-1", "committed"), ("tx-2", "prepared"),
            ("tx-other", "prepared"), ("tx-2", "committed"),
        ]  # fmt: skip
        assert live(first) == {"tx-1", "tx-2", "tx-other"}
        assert session_projection(second).verify_whole().records == 5


# ---------------------------------------------------- views saved by others


def test_two_sessions_saving_the_view_merge_through_the_conflict(
    session_dir: Path, clock: FakeClock
) -> None:
    with (
        open_session(session_dir, clock=clock) as first,
        open_session(session_dir, clock=clock) as second,
    ):
        prepare(first, "tx-1")  # first journal write: `first` saves the view
        prepare(second, "tx-2", "y")  # `second` saves over a view it did not load
        assert live(first) == live(second) == {"tx-1", "tx-2"}
    with open_session(session_dir, clock=clock) as reopened:
        view = reopened.store.get_session_view()
        assert view is not None
        assert set(view.live) == {"tx-1", "tx-2"}
        assert live(reopened) == {"tx-1", "tx-2"}
        session_projection(reopened).verify_whole()


def _view_forgetting(session: Session, tx: str | None = None) -> None:
    """Save a view advanced to the store's end, with `tx` dropped from its leases.

    A damaged cache: whatever the view lacks (a lease it drops, an artifact
    created since it was saved) is taken as folded.
    """
    view = session.store.get_session_view()
    assert view is not None
    end = max(note.id for note in session.store.notifications(after=0))
    view.advance(end, view.checkpoint, {}, [] if tx is None else [tx], {})
    session.store.save_aggregates(view)


def test_a_lease_missing_from_the_saved_view_is_read_from_the_store(
    session_dir: Path, clock: FakeClock
) -> None:
    with open_session(session_dir, clock=clock) as session:
        prepare(session, "tx-1")
        source_id = session.store.get_lease("tx-1").claim_data["source_id"]
        _view_forgetting(session, "tx-1")
    with open_session(session_dir, clock=clock) as session:
        assert live(session) == set()  # the damaged cache, as saved
        session.journal.commit("tx-1")
        leases = session_projection(session).live_leases()
        assert set(leases) == {"tx-1"}
        assert leases["tx-1"].phase.value == "committed"
        assert leases["tx-1"].claim.source_id == source_id
        session_projection(session).verify_whole()


def test_an_artifact_event_with_no_known_creation_is_refused(
    session_dir: Path, clock: FakeClock
) -> None:
    with open_session(session_dir, clock=clock) as session:
        prepare(session, "tx-1")  # the view is saved from here on
    with open_session(session_dir, clock=clock) as session:
        ref = session.externalizer.externalize("a long line\n" * 5000, "bash")
        name = os.path.basename(ref.artifact.path)
        _view_forgetting(session)
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        artifact.quarantine("intent", quarantined_at=clock.now())
        session.store.save_aggregates(artifact)
    with (
        open_session(session_dir, clock=clock, recover=False) as session,
        pytest.raises(ArtifactLeaseJournalError, match="no creation"),
    ):
        session_projection(session).artifact_records()
