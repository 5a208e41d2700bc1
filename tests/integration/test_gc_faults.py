"""GC (S6) paths the main suite does not reach: races and I/O errors mid-run.

Each case runs the real collector on a real session through an
`InterceptingFS`, the real seam with a hook before or after one call, which
plays the part of another process (or a failing disk) at one exact moment.
"""

from __future__ import annotations

import contextlib
import errno
import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.services.gc import (
    apply_cleanup_from_journal,
    plan_cleanup_from_journal,
)
from spillvault.adapters.session import Session, open_session
from spillvault.domain.enums import ArtifactCleanupStatus
from spillvault.domain.values import ArtifactCleanupPolicy

from support.fakes import FakeClock
from support.intercept import InterceptingFS, named

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

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
