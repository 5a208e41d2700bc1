"""GC (S6) paths the main suite does not reach: races and I/O errors mid-run.

Each case runs the real collector on a real session through an
`InterceptingFS`, the real seam with a hook before or after one call, which
plays the part of another process (or a failing disk) at one exact moment.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.services import gc
from spillvault.adapters.services.gc import (
    apply_cleanup_from_journal,
    plan_cleanup_from_journal,
)
from spillvault.adapters.session import Session, open_session
from spillvault.adapters.storage.session_lock import LOCK_NAME
from spillvault.domain.enums import ArtifactCleanupStatus
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from support.fakes import FakeClock
from support.intercept import InterceptingFS, named

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.services.externalizer import ExternalizedToolResult

    from support.intercept import Call

Status = ArtifactCleanupStatus
OLD = timedelta(days=2)


def deleting() -> ArtifactCleanupPolicy:
    return ArtifactCleanupPolicy(orphan_ttl_seconds=3600.0, dry_run=False)


@pytest.fixture
def fs() -> InterceptingFS:
    return InterceptingFS()


@pytest.fixture
def session(session_dir: Path, fs: InterceptingFS) -> Iterator[Session]:
    with open_session(session_dir, fs=fs, clock=FakeClock(datetime.now(UTC))) as s:
        yield s


def stored(session: Session, tag: str) -> str:
    ref = session.externalizer.externalize(f"{tag}: a long line\n" * 5000, "bash")
    return name_of(ref)


def name_of(ref: ExternalizedToolResult) -> str:
    return os.path.basename(ref.artifact.path)


def state_of(session: Session, name: str) -> str | None:
    artifact = session.store.get_artifact(name)
    return None if artifact is None else artifact.state


def results_of(session_dir: Path) -> Path:
    return session_dir / "tool-results"


def intents_of(session_dir: Path) -> list[str]:
    return sorted(os.listdir(session_dir / ".quarantine"))


def fds_on(path: Path) -> list[int]:
    """This process's descriptors open on `path`."""
    found = []
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(f"/proc/self/fd/{entry}") == str(path):
                found.append(int(entry))
    return found


@pytest.fixture
def batches_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """One candidate per batch: an error in a batch leaves the next one unreached."""
    monkeypatch.setattr(gc, "BATCH_CANDIDATES", 1)


# ------------------------------------------------------------------- planning


def test_an_artifact_that_vanishes_while_scanned_is_reported_missing(
    session: Session, session_dir: Path, fs: InterceptingFS
) -> None:
    gone, kept = stored(session, "gone"), stored(session, "kept")
    path = results_of(session_dir) / gone

    def unlink(call: Call) -> None:
        path.unlink()  # removed between the listing and the lstat

    with fs.before("lstat", unlink, when=named(gone), times=1):
        plan = plan_cleanup_from_journal(
            session, policy=deleting(), now=session.clock.now() + OLD
        )
    decisions = {d.filename: d for d in plan.decisions}
    assert decisions[gone].status is Status.MISSING
    assert decisions[gone].reason == "unreferenced_artifact_missing"
    assert "vanished while scanned" in decisions[gone].detail
    assert decisions[gone].snapshot is None
    assert decisions[kept].status is Status.PLANNED_DELETE
    assert [d.filename for d in plan.candidates()] == [kept]
    assert state_of(session, gone) == "sealed"  # planning records nothing


def _orphan_file(session_dir: Path, name: str) -> Path:
    path = results_of(session_dir) / name
    path.write_bytes(b"no event for me\n" * 100)
    path.chmod(0o600)
    return path


def test_an_orphan_swapped_for_a_symlink_before_adoption_is_not_adopted(
    session: Session, session_dir: Path, fs: InterceptingFS, tmp_path: Path
) -> None:
    path = _orphan_file(session_dir, "tool_result_042.txt")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside\n")

    def swap(call: Call) -> None:
        path.unlink()
        path.symlink_to(outside)

    # hashed once; swapped before the adoption opens it
    with fs.before("open", swap, when=named(path.name), nth=2, times=1) as opens:
        plan = plan_cleanup_from_journal(
            session, policy=deleting(), now=session.clock.now() + OLD
        )
    assert opens.hits == 2
    decision = {d.filename: d for d in plan.decisions}[path.name]
    assert decision.status is Status.RETAINED_UNKNOWN
    assert decision.reason == "artifact_not_stored"
    assert decision.detail == "a file for no artifact record"
    assert plan.candidates() == ()
    assert state_of(session, path.name) is None  # no adoption recorded
    assert outside.read_bytes() == b"outside\n"
    assert path.is_symlink()


def test_an_orphan_adopted_meanwhile_by_another_planner_is_adopted_once(
    session: Session, session_dir: Path, fs: InterceptingFS
) -> None:
    path = _orphan_file(session_dir, "tool_result_042.txt")
    now = session.clock.now() + OLD
    inner: list[Status] = []

    def plan_meanwhile(call: Call) -> None:
        hook.remove()  # the concurrent planner runs unhooked
        other = plan_cleanup_from_journal(session, policy=deleting(), now=now)
        inner.extend(d.status for d in other.decisions)

    hook = fs.before("open", plan_meanwhile, when=named(path.name))
    plan = plan_cleanup_from_journal(session, policy=deleting(), now=now)
    assert inner == [Status.PLANNED_DELETE]  # the other planner adopted it
    decision = {d.filename: d for d in plan.decisions}[path.name]
    assert decision.status is Status.PLANNED_DELETE
    assert state_of(session, path.name) == "orphan"
    adoptions = [
        n
        for n in session.store.notifications(after=0)
        if n.topic.startswith("spillvault:Artifact.")
    ]
    assert len(adoptions) == 1  # not adopted a second time


@pytest.mark.parametrize("op", ["open", "fstat"])
def test_an_io_error_reading_an_artifact_stops_the_plan(
    session: Session, session_dir: Path, fs: InterceptingFS, op: str
) -> None:
    name = stored(session, "eio")
    data = (results_of(session_dir) / name).read_bytes()
    opened = fs.watch("open", when=named(name))  # from its open on, `op` fails
    with (
        opened,
        fs.fail(op, errno.EIO, when=lambda call: opened.hits > 0),
        pytest.raises(OSError, match="Input/output error") as raised,
    ):
        plan_cleanup_from_journal(
            session, policy=deleting(), now=session.clock.now() + OLD
        )
    assert raised.value.errno == errno.EIO
    assert fds_on(results_of(session_dir) / name) == []  # closed on the way out
    assert (results_of(session_dir) / name).read_bytes() == data
    assert state_of(session, name) == "sealed"


# ------------------------------------------------------------------- applying


def _planned(session: Session, name: str) -> tuple[Any, datetime]:
    when = session.clock.now() + OLD
    plan = plan_cleanup_from_journal(session, policy=deleting(), now=when)
    assert [d.filename for d in plan.candidates()] == [name]
    return plan, when


@pytest.mark.usefixtures("batches_of_one")
def test_an_io_error_after_the_recorded_deletion_reports_it_and_stops(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        first, second = stored(session, "first"), stored(session, "second")
        plan, when = _planned_two(session, first, second)
        with fs.fail("rmdir", errno.EIO):  # removing the emptied intent directory
            report = apply_cleanup_from_journal(session, plan, now=when)
        assert report.error is not None
        assert report.error.startswith(f"{first}: ")
        # The deletion is reported as done; only the second file is untouched.
        assert [(d.filename, d.status.value) for d in report.decisions] == [
            (first, "deleted"),
            (second, "planned_delete"),
        ]
        assert report.untouched == (second,)
        # The unlink was verified and recorded before the error: it stands.
        assert state_of(session, first) == "deleted"
        assert not (results_of(session_dir) / first).exists()
        assert state_of(session, second) == "sealed"
        assert len(intents_of(session_dir)) == 1  # the empty intent is left
    with open_session(session_dir, clock=clock) as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == []
        assert intents_of(session_dir) == []  # the next open removes it
        assert state_of(reopened, first) == "deleted"
        assert state_of(reopened, second) == "sealed"


def _planned_two(session: Session, first: str, second: str) -> tuple[Any, datetime]:
    when = session.clock.now() + OLD
    plan = plan_cleanup_from_journal(session, policy=deleting(), now=when)
    assert [d.filename for d in plan.candidates()] == [first, second]
    return plan, when


def _quarantined_path(session_dir: Path, name: str) -> Path:
    (intent,) = intents_of(session_dir)
    return session_dir / ".quarantine" / intent / name


def test_a_file_removed_from_its_intent_directory_is_recorded_deleted_on_reopen(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        name = stored(session, "taken")
        plan, when = _planned(session, name)

        def take(call: Call, result: None) -> None:
            _quarantined_path(session_dir, name).unlink()  # by someone else

        with fs.after("rename", take, when=named(name)):
            report = apply_cleanup_from_journal(session, plan, now=when)
        (outcome,) = report.decisions
        assert outcome.status is Status.RACE_DETECTED
        assert outcome.detail == "not the planned file: left in quarantine"
        assert report.error is None
        assert state_of(session, name) == "quarantined"
        assert not (results_of(session_dir) / name).exists()
    with open_session(session_dir, clock=clock) as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == [name]
        assert state_of(reopened, name) == "deleted"
        assert intents_of(session_dir) == []


def test_a_changed_file_whose_name_was_taken_stays_quarantined(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        name = stored(session, "changed")
        plan, when = _planned(session, name)
        newcomer = results_of(session_dir) / name

        def change_and_take(call: Call, result: None) -> None:
            moved = _quarantined_path(session_dir, name)
            with moved.open("ab") as file:  # changed after planning
                file.write(b"one more line\n")
            newcomer.write_bytes(b"a new file took the name\n")
            newcomer.chmod(0o600)

        with fs.after("rename", change_and_take, when=named(name)):
            report = apply_cleanup_from_journal(session, plan, now=when)
        (outcome,) = report.decisions
        assert outcome.status is Status.RACE_DETECTED
        assert outcome.detail == "not the planned file: left in quarantine"
        moved = _quarantined_path(session_dir, name)
        assert moved.read_bytes().endswith(b"one more line\n")
        assert newcomer.read_bytes() == b"a new file took the name\n"
        assert state_of(session, name) == "quarantined"
    with open_session(session_dir, clock=clock) as reopened:
        # Still taken: recovery must not overwrite the newcomer either.
        assert state_of(reopened, name) == "quarantined"
        assert newcomer.read_bytes() == b"a new file took the name\n"
        assert (
            _quarantined_path(session_dir, name)
            .read_bytes()
            .endswith(b"one more line\n")
        )


@pytest.mark.usefixtures("batches_of_one")
def test_an_io_error_after_a_recorded_put_back_reports_it_and_stops(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        first, second = stored(session, "first"), stored(session, "second")
        plan, when = _planned_two(session, first, second)

        def change(call: Call, result: None) -> None:
            with _quarantined_path(session_dir, first).open("ab") as file:
                file.write(b"changed after planning\n")

        with (
            fs.after("rename", change, when=named(first)),
            fs.fail("rmdir", errno.EIO),  # removing the emptied intent directory
        ):
            report = apply_cleanup_from_journal(session, plan, now=when)
        assert report.error is not None
        assert report.error.startswith(f"{first}: ")
        assert [(d.filename, d.detail) for d in report.decisions] == [
            (first, "not the planned file: put back"),
            (second, plan.decisions[1].detail),  # not reached: still planned
        ]
        assert report.untouched == (second,)
        assert state_of(session, first) == "sealed"
        assert (
            (results_of(session_dir) / first)
            .read_bytes()
            .endswith(b"changed after planning\n")
        )
        assert state_of(session, second) == "sealed"
    with open_session(session_dir, clock=clock):
        assert intents_of(session_dir) == []  # the next open removes it


# -------------------------------------------------------------------- batches


def _stored_many(session: Session, count: int) -> list[str]:
    """`count` artifacts of one size; their names in the order apply takes them."""
    return [stored(session, f"c{n}") for n in range(count)]


def _intent_groups(session: Session, names: list[str]) -> list[int]:
    """How many consecutive candidates shared each recorded quarantine intent."""
    intents = []
    for name in names:
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        intents.append(artifact.quarantine_intent)  # kept by the deletion
    assert len(set(intents)) == len(list(itertools.groupby(intents)))
    return [len(list(group)) for _, group in itertools.groupby(intents)]


@pytest.mark.parametrize(
    ("bound", "batches"),
    [("candidates", [3, 3, 1]), ("bytes", [2, 2, 2, 1])],
)
def test_apply_takes_bounded_batches_each_with_one_intent_and_two_commits(
    session_dir: Path,
    fs: InterceptingFS,
    monkeypatch: pytest.MonkeyPatch,
    bound: str,
    batches: list[int],
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        names = _stored_many(session, 7)
        sizes = {(results_of(session_dir) / name).stat().st_size for name in names}
        (size,) = sizes
        if bound == "candidates":
            monkeypatch.setattr(gc, "BATCH_CANDIDATES", 3)
        else:  # two files fit, a third would pass the bound
            monkeypatch.setattr(gc, "BATCH_BYTES", 3 * size - 1)
        when = clock.now() + OLD
        plan = plan_cleanup_from_journal(session, policy=deleting(), now=when)
        assert [d.filename for d in plan.candidates()] == names
        commits: list[int] = []
        save = session.store.save_aggregates

        def counted(*aggregates: Any) -> None:
            commits.append(len(aggregates))
            save(*aggregates)

        monkeypatch.setattr(session.store, "save_aggregates", counted)
        with (
            fs.watch("fsync") as fsyncs,
            fs.watch("open", when=named(LOCK_NAME)) as holds,
        ):
            report = apply_cleanup_from_journal(session, plan, now=when)
        monkeypatch.undo()
        assert report.error is None
        assert {d.filename: d.status for d in report.decisions} == dict.fromkeys(
            names, Status.DELETED
        )
        assert _intent_groups(session, names) == batches
        # Per batch: its intents in one commit, its deletions in another ...
        assert commits == [n for n in batches for _ in range(2)]
        # ... five directory fsyncs whatever its size, and one hold of the lock.
        assert fsyncs.hits == 5 * len(batches)
        assert holds.hits == len(batches)
        assert os.listdir(results_of(session_dir)) == []
        assert intents_of(session_dir) == []


def test_one_batch_deletes_some_puts_one_back_and_keeps_a_leased_one(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        doomed, changed = _stored_many(session, 2)
        leased = session.externalizer.externalize("c2: a long line\n" * 5000, "bash")
        last = stored(session, "c3")
        names = [doomed, changed, name_of(leased), last]
        plan, when = _planned_many(session, names)
        session.journal.prepare(
            ArtifactRetentionClaim.from_memory_reference(leased.artifact.for_memory())
        )

        def change(call: Call, result: None) -> None:
            with _quarantined_path(session_dir, changed).open("ab") as file:
                file.write(b"changed after planning\n")

        with fs.after("rename", change, when=named(changed)):
            report = apply_cleanup_from_journal(session, plan, now=when)
        assert report.error is None
        assert {d.filename: (d.status, d.detail) for d in report.decisions} == {
            doomed: (Status.DELETED, "verified and unlinked"),
            changed: (Status.RACE_DETECTED, "not the planned file: put back"),
            names[2]: (Status.RETAINED_REFERENCED, "a claim appeared after planning"),
            last: (Status.DELETED, "verified and unlinked"),
        }
        assert {n: state_of(session, n) for n in names} == {
            doomed: "deleted",
            changed: "sealed",
            names[2]: "sealed",
            last: "deleted",
        }
        assert sorted(os.listdir(results_of(session_dir))) == [changed, names[2]]
        assert (
            (results_of(session_dir) / changed)
            .read_bytes()
            .endswith(b"changed after planning\n")
        )
        assert intents_of(session_dir) == []


def test_an_io_error_moving_a_batch_puts_back_what_moved_and_stops(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        names = _stored_many(session, 3)
        data = {n: (results_of(session_dir) / n).read_bytes() for n in names}
        plan, when = _planned_many(session, names)
        with fs.fail("rename", errno.EIO, when=named(names[1])):
            report = apply_cleanup_from_journal(session, plan, now=when)
        assert report.error is not None
        assert report.error.startswith(f"{names[1]}: ")
        assert "Input/output error" in report.error
        # The first had moved: put back; none was reported or recorded deleted.
        assert report.decisions == plan.decisions
        assert report.untouched == tuple(names)
        for name in names:
            assert (results_of(session_dir) / name).read_bytes() == data[name]
            assert state_of(session, name) == "sealed"  # settled, usable
    with open_session(session_dir, clock=clock) as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == []
        assert intents_of(session_dir) == []
        again = plan_cleanup_from_journal(reopened, policy=deleting(), now=when)
        report = apply_cleanup_from_journal(reopened, again, now=when)
        assert {d.status for d in report.decisions} == {Status.DELETED}


def test_an_io_error_checking_a_candidate_deletes_those_admitted_and_stops(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        names = _stored_many(session, 3)
        first, failing, third = names
        data = {n: (results_of(session_dir) / n).read_bytes() for n in names}
        plan, when = _planned_many(session, names)
        with fs.fail("lstat", errno.EIO, when=named(failing)):
            report = apply_cleanup_from_journal(session, plan, now=when)
        assert report.error is not None
        assert report.error.startswith(f"{failing}: ")
        assert "Input/output error" in report.error
        # The one admitted before the error is deleted as planned; the rest wait.
        statuses = {d.filename: d.status for d in report.decisions}
        assert statuses[first] is Status.DELETED
        assert report.untouched == (failing, third)
        assert state_of(session, first) == "deleted"
        assert not (results_of(session_dir) / first).exists()
        for name in (failing, third):
            assert (results_of(session_dir) / name).read_bytes() == data[name]
            assert state_of(session, name) == "sealed"
    with open_session(session_dir, clock=clock) as reopened:
        assert intents_of(session_dir) == []
        again = plan_cleanup_from_journal(reopened, policy=deleting(), now=when)
        report = apply_cleanup_from_journal(reopened, again, now=when)
        assert {d.filename: d.status for d in report.decisions} == {
            failing: Status.DELETED,
            third: Status.DELETED,
        }


def test_an_unlink_refused_mid_batch_reports_the_deletions_made_and_denies_it(
    session_dir: Path, fs: InterceptingFS
) -> None:
    clock = FakeClock(datetime.now(UTC))
    with open_session(session_dir, fs=fs, clock=clock) as session:
        names = _stored_many(session, 3)
        first, refused, third = names
        data = {n: (results_of(session_dir) / n).read_bytes() for n in names}
        plan, when = _planned_many(session, names)
        with fs.fail("unlink", errno.EACCES, when=named(refused), times=1):
            report = apply_cleanup_from_journal(session, plan, now=when)
        assert report.error is not None
        assert report.error.startswith(f"{refused}: ")
        assert {d.filename: (d.status, d.reason) for d in report.decisions} == {
            first: (Status.DELETED, "expired_unreferenced_artifact_deleted"),
            refused: (Status.DENIED, "artifact_delete_denied"),
            third: (Status.PLANNED_DELETE, "expired_unreferenced_artifact"),
        }
        assert report.untouched == (third,)
        # The unlink made before the refusal is recorded; the others went back.
        assert state_of(session, first) == "deleted"
        assert not (results_of(session_dir) / first).exists()
        for name in (refused, third):
            assert (results_of(session_dir) / name).read_bytes() == data[name]
            assert state_of(session, name) == "sealed"
    with open_session(session_dir, clock=clock) as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == []
        assert intents_of(session_dir) == []
        assert state_of(reopened, first) == "deleted"


def _planned_many(session: Session, names: list[str]) -> tuple[Any, datetime]:
    when = session.clock.now() + OLD
    plan = plan_cleanup_from_journal(session, policy=deleting(), now=when)
    assert [d.filename for d in plan.candidates()] == names
    return plan, when
