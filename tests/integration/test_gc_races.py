"""GC between its phases (S6.2, S6.3, S4.7): races, entries not ours, I/O errors, locks.

Every case is set up from the real world: files changed, linked, swapped or
removed by hand between planning and applying. After each run the tests check
what must never happen: a protected artifact deleted, an entry that is not an
artifact of ours touched, anything outside the session touched.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import (
    Session,
    open_session,
)
from spillvault.domain.cleanup import (
    ArtifactCleanupDecision,
    ArtifactCleanupPlan,
    ArtifactCleanupReport,
)
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
)

from support.intercept import Gate, InterceptingFS
from support.locks import witnessing
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable

    from spillvault.domain.values import (
        ArtifactReference,
    )

    from support.fakes import FakeClock
    from support.intercept import Call
from support.gc_world import (
    OLD,
    Status,
    applied,
    apply_gc,
    assert_path_free,
    assert_readable,
    assert_sentinel_intact,
    by_name,
    claim_of,
    committed,
    deleting,
    entries,
    flip_first_byte,
    must_finish_within,
    name_of,
    plan_gc,
    private_file,
    quarantine_of,
    set_mtime,
    state_of,
    statuses,
    stored,
)

# -------------------------------------------------- S6.2: races between the phases


@dataclass
class Race:
    """A plan with one candidate; the test changes the world, then applies."""

    session: Session
    session_dir: Path
    plan: ArtifactCleanupPlan
    when: datetime
    candidate: ArtifactReference
    data: bytes
    protected: ArtifactReference
    protected_data: bytes
    sentinel: Path

    @property
    def results(self) -> Path:
        return self.session_dir / "tool-results"

    @property
    def path(self) -> Path:
        return self.results / name_of(self.candidate)

    def apply(self) -> ArtifactCleanupDecision:
        """Apply; check only a planned candidate went; return its outcome."""
        before = entries(self.results)
        report = apply_gc(self.session, self.plan, self.when)
        after = entries(self.results)
        deleted = {d.filename for d in report.decisions if d.status is Status.DELETED}
        assert deleted <= {d.filename for d in self.plan.candidates()}
        for name in deleted:
            del before[name]
        assert after == before  # untouched, inode, mode, mtime and bytes
        assert (self.results / name_of(self.protected)).read_bytes() == (
            self.protected_data
        )
        assert state_of(self.session, name_of(self.protected)) == "sealed"
        assert (self.results / "notes.txt").read_bytes() == b"notes\n"
        assert_sentinel_intact(self.sentinel)
        assert quarantine_of(self.session_dir) == []
        for decision in report.decisions:
            assert_readable(decision, self.session_dir)
        assert applied(report, self.plan).keys() == {name_of(self.candidate)}
        return by_name(report)[name_of(self.candidate)]


@pytest.fixture
def race(session: Session, session_dir: Path, sentinel: Path) -> Race:
    candidate = stored(session, "candidate")
    protected = stored(session, "protected")
    committed(session, protected)
    private_file(session_dir / "tool-results" / "notes.txt", b"notes\n")
    when = session.clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    assert statuses(plan) == {
        name_of(candidate): Status.PLANNED_DELETE,
        name_of(protected): Status.RETAINED_REFERENCED,
        "notes.txt": Status.RETAINED_UNKNOWN,
    }
    return Race(
        session=session,
        session_dir=session_dir,
        plan=plan,
        when=when,
        candidate=candidate,
        data=(session_dir / "tool-results" / name_of(candidate)).read_bytes(),
        protected=protected,
        protected_data=(session_dir / "tool-results" / name_of(protected)).read_bytes(),
        sentinel=sentinel,
    )


def test_race_the_file_replaced_by_another_inode_with_the_same_bytes(
    race: Race, tmp_path: Path
) -> None:
    info = race.path.stat()
    twin = private_file(tmp_path / "twin", race.data)
    os.utime(twin, ns=(info.st_atime_ns, info.st_mtime_ns))
    os.replace(twin, race.path)
    outcome = race.apply()
    assert outcome.status is Status.RACE_DETECTED
    assert race.path.read_bytes() == race.data
    assert race.path.stat().st_ino != info.st_ino
    assert state_of(race.session, name_of(race.candidate)) == "sealed"


def test_race_the_file_replaced_by_a_symlink_to_a_file_outside(race: Race) -> None:
    link = race.results / "link-being-swapped"
    link.symlink_to(race.sentinel)
    os.replace(link, race.path)
    outcome = race.apply()
    assert outcome.status is Status.RACE_DETECTED
    assert race.path.is_symlink()
    assert os.readlink(race.path) == str(race.sentinel)


def test_race_the_file_hard_linked_elsewhere_is_put_back(
    race: Race, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "outside" / "hard-link"
    os.link(race.path, elsewhere)
    outcome = race.apply()
    assert outcome.status is Status.RACE_DETECTED
    assert outcome.reason == "artifact_changed_after_cleanup_plan"
    assert "put back" in outcome.detail
    assert race.path.read_bytes() == race.data
    assert elsewhere.read_bytes() == race.data
    assert race.path.stat().st_ino == elsewhere.stat().st_ino
    assert elsewhere.stat().st_nlink == 2
    assert state_of(race.session, name_of(race.candidate)) == "sealed"


def test_race_the_content_changed_with_the_mtime_restored_is_put_back(
    race: Race,
) -> None:
    info = race.path.stat()
    flip_first_byte(race.path, keep_mtime=True)
    assert race.path.stat().st_mtime_ns == info.st_mtime_ns
    changed = race.path.read_bytes()
    outcome = race.apply()
    assert outcome.status is Status.RACE_DETECTED
    assert outcome.reason == "artifact_changed_after_cleanup_plan"
    assert "put back" in outcome.detail
    assert race.path.read_bytes() == changed
    assert race.path.stat().st_ino == info.st_ino
    assert state_of(race.session, name_of(race.candidate)) == "sealed"
    again = plan_gc(race.session, policy=deleting(), now=race.when)
    assert statuses(again)[name_of(race.candidate)] is Status.RETAINED_CORRUPT


def test_race_a_new_prepared_lease_retains_the_file(race: Race) -> None:
    race.session.journal.prepare(claim_of(race.candidate))
    outcome = race.apply()
    assert outcome.status is Status.RETAINED_REFERENCED
    assert outcome.reference_count == 1
    assert race.path.read_bytes() == race.data
    assert state_of(race.session, name_of(race.candidate)) == "sealed"


def test_race_a_lease_committed_then_released_after_planning_no_longer_protects(
    race: Race,
) -> None:
    # S4.3: released is terminal; only prepared and unexpired committed leases
    # protect, so apply's re-fold finds no claim and the file goes as planned.
    journal = race.session.journal
    tx = committed(race.session, race.candidate)
    journal.remove_reference(tx, lambda: None)
    assert race.session.store.get_lease(tx).phase is ArtifactLeasePhase.RELEASED
    outcome = race.apply()
    assert outcome.status is Status.DELETED
    assert outcome.reference_count == 0
    assert not race.path.exists()
    assert state_of(race.session, name_of(race.candidate)) == "deleted"


def test_race_the_file_deleted_by_hand_is_already_missing(race: Race) -> None:
    race.path.unlink()
    outcome = race.apply()
    assert outcome.status is Status.ALREADY_MISSING
    assert state_of(race.session, name_of(race.candidate)) == "lost"
    again = plan_gc(race.session, policy=deleting(), now=race.when)
    assert statuses(again)[name_of(race.candidate)] is Status.MISSING


# ---------------------------------------- S6.3: what is not ours is never touched


def test_unknown_entries_of_every_kind_are_never_touched(
    session: Session, session_dir: Path, sentinel: Path, tmp_path: Path
) -> None:
    results = session_dir / "tool-results"
    old = session.clock.now() - OLD
    (results / "a-directory").mkdir(mode=0o700)
    private_file(results / "a-directory" / "inside.txt", b"inside\n")
    (results / "tool_result_500.txt").mkdir(mode=0o700)
    (results / "a-link").symlink_to(sentinel)
    (results / "tool_result_501.txt").symlink_to(sentinel)
    (results / "tool_result_502.txt").symlink_to(tmp_path / "dangling")
    os.mkfifo(results / "a-fifo", 0o600)
    os.mkfifo(results / "tool_result_503.txt", 0o600)
    for name in ("notes.txt", ".tmp-stale", "tool_result_7.txt", "TOOL_RESULT_504.TXT"):
        private_file(results / name, b"not an artifact\n")
    for name in os.listdir(results):
        set_mtime(results / name, old)
    real = name_of(stored(session, "a real one"))  # deleted: GC is really on
    # Numbers come from the event store's counter (S2.2); none of these names
    # is taken on the way, so nothing is listed or skipped.
    assert real == "tool_result_001.txt"
    when = session.clock.now() + OLD
    before = entries(results)

    plan = plan_gc(session, policy=deleting(), now=when)
    report = apply_gc(session, plan, when)

    assert applied(report, plan) == {real: Status.DELETED}
    del before[real]
    assert entries(results) == before
    assert (results / "a-directory" / "inside.txt").read_bytes() == b"inside\n"
    assert {n: s for n, s in statuses(plan).items() if n != real} == {
        "a-directory": Status.DENIED,
        "tool_result_500.txt": Status.DENIED,
        "a-link": Status.DENIED,
        "tool_result_501.txt": Status.DENIED,
        "tool_result_502.txt": Status.DENIED,
        "a-fifo": Status.DENIED,
        "tool_result_503.txt": Status.DENIED,
        "notes.txt": Status.RETAINED_UNKNOWN,
        ".tmp-stale": Status.RETAINED_UNKNOWN,
        "tool_result_7.txt": Status.RETAINED_UNKNOWN,
        "TOOL_RESULT_504.TXT": Status.RETAINED_UNKNOWN,
    }
    assert_sentinel_intact(sentinel)
    assert quarantine_of(session_dir) == []


def _swap_in(kind: str, path: Path, sentinel: Path) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir(mode=0o700)
        private_file(path / "inside.txt", b"inside\n")
    elif kind == "symlink":
        path.symlink_to(sentinel)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)  # the test runs inside tool-results
    else:  # a regular file of someone else's, group-readable
        path.write_bytes(b"someone else's\n")
        path.chmod(0o644)


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink", "socket", "other"])
def test_an_entry_swapped_in_for_a_candidate_is_never_touched(
    race: Race, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(race.results)
    _swap_in(kind, race.path, race.sentinel)
    outcome = race.apply()  # under a timeout: a FIFO must never block us
    assert outcome.status is Status.RACE_DETECTED
    assert os.path.lexists(race.path)
    if kind == "directory":
        assert (race.path / "inside.txt").read_bytes() == b"inside\n"


def in_quarantine(dir_fd: int | None) -> bool:
    """Say whether `dir_fd` is a directory inside `.quarantine/`."""
    if dir_fd is None:
        return False
    return "/.quarantine/" in os.readlink(f"/proc/self/fd/{dir_fd}")


def test_a_fifo_swapped_in_between_the_check_and_the_move_never_blocks(
    session_dir: Path, clock: FakeClock, sentinel: Path
) -> None:
    name = "tool_result_001.txt"

    def swap_for_fifo(call: Call) -> None:
        """Replace the file by a FIFO, as another process could after the check."""
        os.unlink(name, dir_fd=call["src_dir_fd"])
        os.mkfifo(name, 0o600, dir_fd=call["src_dir_fd"])

    fs = InterceptingFS()
    swap = fs.before(  # GC's move of `name` into quarantine
        "rename",
        swap_for_fifo,
        when=lambda call: call["src"] == name and in_quarantine(call["dst_dir_fd"]),
        times=1,
    )
    with open_session(session_dir, fs=fs, clock=clock) as session:
        ref = stored(session, "swapped at the last moment")
        assert name_of(ref) == name
        when = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=when)
        report = apply_gc(session, plan, when)  # fails after 30 s if it blocks
        assert swap.fired == 1
        outcome = by_name(report)[name]
        assert outcome.status is Status.RACE_DETECTED
        assert_readable(outcome)
        # S6.2: anything but a regular file is left quarantined, never unlinked.
        (intent,) = quarantine_of(session_dir)
        held = session_dir / ".quarantine" / intent / name
        assert stat.S_ISFIFO(held.lstat().st_mode)
        assert state_of(session, name) == "quarantined"
    with must_finish_within(30), open_session(session_dir, clock=clock) as reopened:
        assert stat.S_ISFIFO(held.lstat().st_mode)
        assert state_of(reopened, name) == "quarantined"
    assert_sentinel_intact(sentinel)


def test_a_group_readable_artifact_named_file_is_never_deleted(
    session: Session, session_dir: Path
) -> None:
    path = session_dir / "tool-results" / "tool_result_077.txt"
    path.write_bytes(b"dropped here by someone\n")
    path.chmod(0o644)
    when = session.clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    assert statuses(plan)[path.name] in {Status.DENIED, Status.RETAINED_UNKNOWN}
    assert_readable(by_name(plan)[path.name])
    apply_gc(session, plan, when)
    assert path.read_bytes() == b"dropped here by someone\n"


def test_the_reason_for_a_group_readable_file_does_not_call_it_a_symlink(
    session: Session, session_dir: Path
) -> None:
    path = session_dir / "tool-results" / "tool_result_077.txt"
    path.write_bytes(b"dropped here by someone\n")
    path.chmod(0o644)
    plan = plan_gc(session, policy=deleting(), now=session.clock.now() + OLD)
    decision = by_name(plan)[path.name]
    assert decision.reason == "artifact_read_denied"
    assert "symlink" not in decision.detail


def test_a_stray_file_in_the_quarantine_does_not_stop_the_session_opening(
    session_dir: Path, clock: FakeClock
) -> None:
    with open_session(session_dir, clock=clock) as session:
        stored(session, "any")
    stray = private_file(session_dir / ".quarantine" / "stray", b"stray\n")
    with open_session(session_dir, clock=clock):
        assert stray.read_bytes() == b"stray\n"


# ------------------------------------------------- S6.2: an I/O error stops the run


def _failed_run(
    session_dir: Path, clock: FakeClock
) -> tuple[Session, list[ArtifactReference]]:
    """Store two old artifacts, then apply a plan while every rename fails."""
    fs = InterceptingFS()
    session = open_session(session_dir, fs=fs, clock=clock)
    refs = [stored(session, tag) for tag in ("first", "second")]
    when = clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    with fs.fail("rename", errno.EIO):  # a bad disk
        report = apply_gc(session, plan, when)
    assert report.error is not None
    assert name_of(refs[0]) in report.error
    assert applied(report, plan) == dict.fromkeys(
        (name_of(r) for r in refs), Status.PLANNED_DELETE
    )
    assert report.untouched == tuple(name_of(r) for r in refs)
    assert_path_free(report.to_dict(), session_dir)
    return session, refs


def test_an_io_error_stops_the_run_and_the_next_open_puts_things_right(
    session_dir: Path, clock: FakeClock, sentinel: Path
) -> None:
    session, refs = _failed_run(session_dir, clock)
    data = {name_of(r): Path(r.path).read_bytes() for r in refs}
    session.close()
    with open_session(session_dir, clock=clock) as reopened:
        assert quarantine_of(session_dir) == []
        for name, content in data.items():
            assert state_of(reopened, name) == "sealed"
            assert (session_dir / "tool-results" / name).read_bytes() == content
        when = clock.now() + OLD
        report = apply_gc(
            reopened, plan_gc(reopened, policy=deleting(), now=when), when
        )
        assert statuses(report) == dict.fromkeys(data, Status.DELETED)
    assert_sentinel_intact(sentinel)


def test_an_io_error_leaves_the_artifact_usable_in_the_running_session(
    session_dir: Path, clock: FakeClock
) -> None:
    session, refs = _failed_run(session_dir, clock)
    with session:
        assert os.path.exists(refs[0].path)  # the move never happened
        assert state_of(session, name_of(refs[0])) == "sealed"
        assert session.externalizer.read_artifact(refs[0], 0, 1)
        session.journal.prepare(claim_of(refs[0]))


@pytest.mark.parametrize("directory", [".quarantine", "tool-results"])
def test_apply_refuses_a_directory_swapped_for_a_symlink(
    session: Session, session_dir: Path, tmp_path: Path, directory: str
) -> None:
    ref = stored(session, "candidate")
    when = session.clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    decoy = tmp_path / "decoy"
    (session_dir / directory).rename(decoy)
    (session_dir / directory).symlink_to(decoy)
    decoy_before = entries(decoy)
    with pytest.raises(ArtifactAccessError, match="symlink"):
        apply_gc(session, plan, when)
    assert entries(decoy) == decoy_before
    (session_dir / directory).unlink()
    decoy.rename(session_dir / directory)
    assert Path(ref.path).exists()
    assert state_of(session, name_of(ref)) == "sealed"


# ---------------------------------------------------------- S4.7: prepared forever


def test_a_prepared_lease_whose_publisher_timed_out_protects_through_every_run(
    session_dir: Path, clock: FakeClock, sentinel: Path
) -> None:
    start = clock.now()

    def timing_out() -> None:
        msg = "the memory owner did not answer"
        raise TimeoutError(msg)

    with open_session(session_dir, clock=clock) as session:
        ref = stored(session, "in flight")
        bystander = stored(session, "bystander")
        claim = claim_of(ref, retain_until=start + timedelta(minutes=1))
        with pytest.raises(TimeoutError):
            session.journal.publish_reference(
                claim, timing_out, transaction_id="tx-timeout"
            )
        assert session.journal.recover().pending_transaction_ids == ("tx-timeout",)
    data = Path(ref.path).read_bytes()
    for run, days in enumerate((2, 30, 3650)):
        now = start + timedelta(days=days)  # past the TTL and the retain_until
        with open_session(session_dir, clock=clock) as session:
            plan = plan_gc(session, policy=deleting(), now=now)
            decision = by_name(plan)[name_of(ref)]
            assert decision.status is Status.RETAINED_REFERENCED
            assert decision.reference_count == 1
            assert_readable(decision)
            report = apply_gc(session, plan, now)
            expected = {name_of(bystander): Status.DELETED} if run == 0 else {}
            assert applied(report, plan) == expected
            assert Path(ref.path).read_bytes() == data
            assert state_of(session, name_of(ref)) == "sealed"
            recovered = session.journal.recover(now=now)
            assert recovered.pending_transaction_ids == ("tx-timeout",)
            assert [c.source_id for c in recovered.claims] == [claim.source_id]
    assert_sentinel_intact(sentinel)


# ---------------------------------------------- session lock: leases against GC


def _run(target: Callable[[], object], into: dict[str, object], key: str) -> Any:
    def run() -> None:
        try:
            into[key] = target()
        except BaseException as error:  # handed to the test thread
            into[key] = error

    return run


def lock_is_held(session_dir: Path) -> bool:
    """Whether some descriptor holds the session's flock (ours conflict too)."""
    import fcntl  # noqa: PLC0415

    fd = os.open(session_dir / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_lease_prepared_while_gc_unlinks_waits_then_is_refused(
    session_dir: Path, clock: FakeClock
) -> None:
    name = "tool_result_001.txt"
    fs = InterceptingFS()
    unlink = Gate()  # GC's unlink of `name` inside `.quarantine/` waits there
    fs.before(
        "unlink",
        unlink,
        when=lambda call: call["path"] == name and in_quarantine(call["dir_fd"]),
    )
    with (
        open_session(session_dir, fs=fs, clock=clock) as session,
        witnessing(session.lock) as witness,
    ):
        ref = stored(session, "doomed")
        assert name_of(ref) == name
        when = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=when)
        out: dict[str, object] = {}
        gc_thread = threading.Thread(
            target=_run(
                lambda: session.externalizer.apply_cleanup_from_journal(
                    plan, session.journal, now=when
                ),
                out,
                "gc",
            )
        )
        lease_thread = threading.Thread(
            target=_run(lambda: session.journal.prepare(claim_of(ref)), out, "lease")
        )
        gc_thread.start()
        try:
            assert unlink.reached.wait(30), "GC never reached the unlink"
            assert lock_is_held(session_dir)
            lease_thread.start()
            assert witness.blocked.wait(HANG_GUARD_SECONDS), (
                "prepare did not wait for the GC lock"
            )
            assert "lease" not in out
        finally:
            unlink.release()
            gc_thread.join(30)
            if lease_thread.ident is not None:  # started
                lease_thread.join(30)
        assert not gc_thread.is_alive()
        assert not lease_thread.is_alive()
        report = out["gc"]
        assert isinstance(report, ArtifactCleanupReport), report
        assert statuses(report) == {name: Status.DELETED}
        assert isinstance(out["lease"], ArtifactLeaseJournalError), out["lease"]
        assert session.journal.recover().states == ()
        assert state_of(session, name) == "deleted"
        assert not os.path.exists(ref.path)


def test_a_lease_prepared_before_gc_takes_the_lock_keeps_the_file(
    session_dir: Path, clock: FakeClock
) -> None:
    fs = InterceptingFS()
    pread = Gate()  # the lease's re-verification of the artifact waits there
    fs.before(
        "pread",
        pread,
        when=lambda call: threading.current_thread().name == "lease-thread",
        times=1,
    )
    with (
        open_session(session_dir, fs=fs, clock=clock) as session,
        witnessing(session.lock) as witness,
    ):
        ref = stored(session, "kept")
        data = Path(ref.path).read_bytes()
        when = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=when)
        assert statuses(plan) == {name_of(ref): Status.PLANNED_DELETE}
        out: dict[str, object] = {}
        lease_thread = threading.Thread(
            target=_run(lambda: session.journal.prepare(claim_of(ref)), out, "lease"),
            name="lease-thread",
        )
        gc_thread = threading.Thread(
            target=_run(
                lambda: session.externalizer.apply_cleanup_from_journal(
                    plan, session.journal, now=when
                ),
                out,
                "gc",
            )
        )
        lease_thread.start()
        try:
            assert pread.reached.wait(30), "prepare never re-verified the artifact"
            assert lock_is_held(session_dir)
            gc_thread.start()
            assert witness.blocked.wait(HANG_GUARD_SECONDS), (
                "GC apply did not wait for the lock"
            )
            assert "gc" not in out
        finally:
            pread.release()
            lease_thread.join(30)
            if gc_thread.ident is not None:  # started
                gc_thread.join(30)
        assert not lease_thread.is_alive()
        assert not gc_thread.is_alive()
        assert not isinstance(out["lease"], BaseException), out["lease"]
        report = out["gc"]
        assert isinstance(report, ArtifactCleanupReport), report
        assert statuses(report) == {name_of(ref): Status.RETAINED_REFERENCED}
        assert Path(ref.path).read_bytes() == data
        assert state_of(session, name_of(ref)) == "sealed"
        assert quarantine_of(session_dir) == []
