"""Optimistic concurrency: a lost race is wrapped and retried by re-deciding (S8.2)."""

from __future__ import annotations

import multiprocessing
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.eventstore import retrying
from spillvault.domain.errors import ArtifactLeaseJournalError, ArtifactStoreConflict

from support.leases import T0, transaction
from support.workers import reserve_numbers

if TYPE_CHECKING:
    from pathlib import Path


@pytest.mark.parametrize("event_store", [None, "memory"])
def test_two_applications_race_on_one_lease(
    session_dir: Path, event_store: str | None
) -> None:
    with (
        open_session(session_dir, event_store=event_store) as one,
        open_session(session_dir, event_store=event_store) as two,
    ):
        assert one.store is not two.store
        one.store.prepare_lease(transaction("session-a", "tx-1"))
        mine, theirs = one.store.get_lease("tx-1"), two.store.get_lease("tx-1")
        mine.commit(T0)
        one.store.save_aggregates(mine)
        theirs.commit(T0)
        before = two.store.max_position()
        with pytest.raises(ArtifactStoreConflict) as caught:
            two.store.save_aggregates(theirs)
        assert isinstance(caught.value, ArtifactLeaseJournalError)
        assert "eventsourcing" in type(caught.value.__cause__).__module__
        assert two.store.max_position() == before
        # The retry helper reloads (committed) and re-decides: release is legal.
        lease = two.store.release_lease("tx-1", T0)
        assert lease.phase_history == ["prepared", "committed", "released"]
        # Re-deciding a command that is no longer legal raises, recording nothing.
        with pytest.raises(ArtifactLeaseJournalError, match="cannot commit from"):
            two.store.commit_lease("tx-1", T0)
        assert one.store.get_lease("tx-1").version == 3


def test_retrying_reruns_after_conflicts_and_gives_up_eventually() -> None:
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ArtifactStoreConflict("lost")
        return "done"

    pauses: list[float] = []
    assert retrying(flaky, sleep=pauses.append) == "done"
    assert len(attempts) == 3
    assert len(pauses) == 2
    assert all(0 <= p <= 0.1 for p in pauses)

    def always() -> str:
        attempts.append(1)
        raise ArtifactStoreConflict("lost")

    attempts.clear()
    with pytest.raises(ArtifactStoreConflict):
        retrying(always, retries=4, sleep=lambda _: None)
    assert len(attempts) == 4


def test_reusing_a_transaction_id_is_refused(session_dir: Path) -> None:
    with open_session(session_dir) as session:
        session.store.prepare_lease(transaction("session-a", "tx-1"))
        session.store.abort_lease("tx-1", T0)
        before = session.store.max_position()
        with pytest.raises(ArtifactLeaseJournalError, match="already used: 'tx-1'"):
            session.store.prepare_lease(transaction("session-a", "tx-1", number=2))
        assert session.store.max_position() == before


def test_unknown_transaction_ids_are_refused(session_dir: Path) -> None:
    with open_session(session_dir) as session:
        with pytest.raises(ArtifactLeaseJournalError, match="unknown transaction id"):
            session.store.commit_lease("never", T0)
        assert session.store.find_lease("never") is None


def test_artifact_numbers_are_never_reused_across_writers(session_dir: Path) -> None:
    with open_session(session_dir) as one, open_session(session_dir) as two:
        taken = [one.store.reserve_artifact_number() for _ in range(3)]
        taken.append(two.store.reserve_artifact_number())
        taken.append(one.store.reserve_artifact_number(at_least=10))
        taken.append(two.store.reserve_artifact_number(at_least=2))
    assert taken == [1, 2, 3, 4, 10, 11]
    with open_session(session_dir) as again:
        assert again.store.reserve_artifact_number() == 12


def test_processes_reserving_numbers_never_share_one(session_dir: Path) -> None:
    open_session(session_dir).close()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = [
        context.Process(
            target=reserve_numbers, args=(str(session_dir), 25, start, results)
        )
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    start.set()
    taken = [n for _ in workers for n in results.get(timeout=60)]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    assert sorted(taken) == list(range(1, 76))
