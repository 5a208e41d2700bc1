"""Garbage collection (S6, S2.6): the S6.1 table, apply outcomes, races, crashes.

Every case is set up from the real world: artifacts stored by the externalizer,
leases recorded through the journal, files changed, linked, swapped or removed
by hand between planning and applying. After each run the tests check what
must never happen: a protected artifact deleted, an entry that is not an
artifact of ours touched, anything outside the session touched, a file stuck
in quarantine.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import signal
import socket
import stat
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import (
    ArtifactRetentionJournal,
    Session,
    ToolResultExternalizer,
    open_session,
)
from spillvault.domain.cleanup import (
    ArtifactCleanupDecision,
    ArtifactCleanupPlan,
    ArtifactCleanupReport,
)
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactCleanupStatus, ArtifactLeasePhase
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactReference,
    ArtifactRetentionClaim,
)

from support import gc_children
from support.fakes import FakeClock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


Status = ArtifactCleanupStatus
TTL = 3600.0
OLD = timedelta(days=2)


# ----------------------------------------------------------------------- helpers


@pytest.fixture
def clock() -> FakeClock:
    # Artifacts get real mtimes: the clock starts at the real time.
    return FakeClock(datetime.now(UTC))


@pytest.fixture
def session(session_dir: Path, clock: FakeClock) -> Iterator[Session]:
    with open_session(session_dir, clock=clock) as opened:
        yield opened


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    """A file outside the session that GC must never touch."""
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "sentinel.txt"
    path.write_bytes(b"outside the session\n" * 100)
    return path


def assert_sentinel_intact(sentinel: Path) -> None:
    assert sentinel.read_bytes() == b"outside the session\n" * 100
    assert stat.S_ISREG(sentinel.lstat().st_mode)


def deleting(**overrides: Any) -> ArtifactCleanupPolicy:
    return ArtifactCleanupPolicy(orphan_ttl_seconds=TTL, dry_run=False, **overrides)


def stored(session: Session, tag: str) -> ArtifactReference:
    text = f"{tag}: a long tool output line\n" * 5000
    return session.externalizer.externalize(text, "bash").artifact


def name_of(ref: ArtifactReference) -> str:
    return os.path.basename(ref.path)


def claim_of(ref: ArtifactReference, **kwargs: Any) -> ArtifactRetentionClaim:
    return ArtifactRetentionClaim.from_memory_reference(ref.for_memory(), **kwargs)


def committed(session: Session, ref: ArtifactReference, **kwargs: Any) -> str:
    """Publish a reference through the journal (PREPARED, then COMMITTED)."""
    transaction, _ = session.journal.publish_reference(
        claim_of(ref, **kwargs), lambda: None
    )
    return transaction.transaction_id


def plan_gc(
    session: Session, *, policy: ArtifactCleanupPolicy, now: datetime
) -> ArtifactCleanupPlan:
    with must_finish_within(30):
        return session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=policy, now=now
        )


def apply_gc(
    session: Session, plan: ArtifactCleanupPlan, now: datetime
) -> ArtifactCleanupReport:
    with must_finish_within(30):
        return session.externalizer.apply_cleanup_from_journal(
            plan, session.journal, now=now
        )


@contextmanager
def must_finish_within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened without O_NONBLOCK would block)."""

    def hung(_signum: int, _frame: object) -> None:
        msg = f"did not finish within {seconds} s"
        raise TimeoutError(msg)

    pending = signal.alarm(0)
    if pending:  # nested: the outer guard keeps running
        signal.alarm(pending)
        yield
        return
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def by_name(
    result: ArtifactCleanupPlan | ArtifactCleanupReport,
) -> dict[str, ArtifactCleanupDecision]:
    names = [d.filename for d in result.decisions]
    assert len(names) == len(set(names)), "one decision per entry"
    return {d.filename: d for d in result.decisions}


def statuses(result: ArtifactCleanupPlan | ArtifactCleanupReport) -> dict[str, Status]:
    return {name: d.status for name, d in by_name(result).items()}


def assert_readable(decision: ArtifactCleanupDecision, *paths: Path) -> None:
    """A reason is a phrase of words a person can read, holding no path."""
    reason = decision.reason
    assert isinstance(reason, str), decision
    assert reason.strip(), decision
    assert re.search(r"[A-Za-z]{2,} [A-Za-z]{2,}", reason), decision
    assert reason.isprintable(), decision
    for path in paths:
        assert str(path) not in reason, decision


def assert_path_free(data: dict[str, Any], *paths: Path) -> None:
    text = json.dumps(data)
    assert json.loads(text) == data
    for path in paths:
        assert str(path) not in text


def state_of(session: Session, name: str) -> str | None:
    artifact = session.store.get_artifact(name)
    return None if artifact is None else artifact.state


def private_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def set_mtime(path: Path, when: datetime) -> None:
    ns = int(when.timestamp() * 1_000_000_000)
    os.utime(path, ns=(ns, ns), follow_symlinks=False)


def flip_first_byte(path: Path, *, keep_mtime: bool = False) -> None:
    """Change one byte in place: same inode, same size."""
    info = path.stat()
    with open(path, "r+b") as file:
        first = file.read(1)
        file.seek(0)
        file.write(bytes([first[0] ^ 0x20]))
    if keep_mtime:
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


Entry = tuple[int, int, int, bytes | None]


def entries(directory: Path) -> dict[str, Entry]:
    """Every entry by name: inode, mode, mtime and (regular files) bytes; lstat only."""
    found: dict[str, Entry] = {}
    for name in os.listdir(directory):
        info = (directory / name).lstat()
        data = (directory / name).read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[name] = (info.st_ino, info.st_mode, info.st_mtime_ns, data)
    return found


def quarantine_of(session_dir: Path) -> list[str]:
    return sorted(os.listdir(session_dir / ".quarantine"))


# ------------------------------------------------------------ S6.1: the plan table


def test_every_status_of_the_s61_table_with_reasons_counts_and_references(
    session: Session,
    session_dir: Path,
    sentinel: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    results = session_dir / "tool-results"
    start = session.clock.now()
    when = start + OLD
    expected: dict[str, Status] = {}

    # denied: anything but a regular file, whatever its name
    (results / "a-directory").mkdir(mode=0o700)
    (results / "tool_result_900.txt").mkdir(mode=0o700)
    (results / "a-symlink").symlink_to(sentinel)
    (results / "tool_result_901.txt").symlink_to(sentinel)
    os.mkfifo(results / "a-fifo", 0o600)
    monkeypatch.chdir(results)  # AF_UNIX paths are short: bind relative
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("a-socket")
    monkeypatch.chdir(tmp_path)
    denied = [
        "a-directory", "tool_result_900.txt", "a-symlink", "tool_result_901.txt",
        "a-fifo", "a-socket",
    ]  # fmt: skip
    try:
        os.mknod(results / "a-device", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        denied.append("a-device")
    except PermissionError:
        pass  # no CAP_MKNOD here: the other kinds still cover the row
    expected |= dict.fromkeys(denied, Status.DENIED)

    # retained_unknown: names that are not ours
    private_file(results / "notes.txt", b"an operator's notes\n")
    private_file(results / ".tmp-leftover", b"half a write")
    expected |= dict.fromkeys(["notes.txt", ".tmp-leftover"], Status.RETAINED_UNKNOWN)

    # retained_open: a stream still being written
    stream = session.externalizer.open_stream("bash")
    stream.write(b"a command still running\n" * 100)
    expected[os.path.basename(stream.handle)] = Status.RETAINED_OPEN

    # retained_corrupt: unclaimed, claimed by a live lease, claimed by an expired one
    changed = stored(session, "changed")
    changed_live = stored(session, "changed-live")
    committed(session, changed_live)
    changed_expired = stored(session, "changed-expired")
    committed(session, changed_expired, retain_until=start + timedelta(minutes=5))
    for ref in (changed, changed_live, changed_expired):
        flip_first_byte(results / name_of(ref))
        expected[name_of(ref)] = Status.RETAINED_CORRUPT

    # retained_referenced: committed 2 + 3, prepared 4, expired 7 (not counted)
    referenced = stored(session, "referenced")
    committed(session, referenced, reference_count=2)
    committed(session, referenced, reference_count=3)
    session.journal.prepare(claim_of(referenced, reference_count=4))
    committed(
        session,
        referenced,
        reference_count=7,
        retain_until=start + timedelta(minutes=5),
    )
    expected[name_of(referenced)] = Status.RETAINED_REFERENCED

    # retained_recent, retained_limit, planned_delete (max_deletions=1, oldest first)
    recent = stored(session, "recent")
    set_mtime(results / name_of(recent), when - timedelta(minutes=1))
    newer_old = stored(session, "old")
    older_old = stored(session, "older")  # a higher number, but older
    set_mtime(results / name_of(older_old), start - timedelta(days=1))
    expected[name_of(recent)] = Status.RETAINED_RECENT
    expected[name_of(newer_old)] = Status.RETAINED_LIMIT
    expected[name_of(older_old)] = Status.PLANNED_DELETE

    # missing_referenced and missing: files removed by hand
    gone_claimed = stored(session, "gone-claimed")
    committed(session, gone_claimed, reference_count=2)
    gone = stored(session, "gone")
    for ref in (gone_claimed, gone):
        (results / name_of(ref)).unlink()
    expected[name_of(gone_claimed)] = Status.MISSING_REFERENCED
    expected[name_of(gone)] = Status.MISSING

    plan = plan_gc(session, policy=deleting(max_deletions=1), now=when)

    assert statuses(plan) == expected
    assert set(expected.values()) == set(Status) - {
        Status.DELETED,
        Status.ALREADY_MISSING,
        Status.RACE_DETECTED,
    }
    for decision in plan.decisions:
        assert_readable(decision, tmp_path)
    counts = dict.fromkeys(expected, 0)
    counts |= {
        name_of(referenced): 2 + 3 + 4,
        name_of(changed_live): 1,
        name_of(gone_claimed): 2,
    }
    assert {n: d.reference_count for n, d in by_name(plan).items()} == counts
    assert plan.counts == dict(Counter(s.value for s in expected.values()))
    assert [d.filename for d in plan.candidates()] == [name_of(older_old)]

    data = plan.to_dict()
    assert_path_free(data, session_dir, tmp_path)
    assert {d["filename"] for d in data["decisions"]} == set(expected)
    assert data["counts"] == plan.counts

    before = entries(results)
    report = apply_gc(session, plan, when)
    assert statuses(report) == {name_of(older_old): Status.DELETED}
    assert report.error is None
    assert report.untouched == ()
    after = entries(results)
    del before[name_of(older_old)]
    # The open stream's bytes are the same: no writes happened since `before`.
    assert after == before
    assert stat.S_ISFIFO(after["a-fifo"][1])
    assert stat.S_ISSOCK(after["a-socket"][1])
    assert state_of(session, name_of(older_old)) == "deleted"
    assert_sentinel_intact(sentinel)
    assert quarantine_of(session_dir) == []
    stream.close()


def test_each_apply_outcome_with_its_reason_and_reference_count(
    session: Session, session_dir: Path, sentinel: Path, tmp_path: Path
) -> None:
    results = session_dir / "tool-results"
    doomed, vanishing, swapped, late = (
        stored(session, tag) for tag in ("doomed", "vanishing", "swapped", "late")
    )
    when = session.clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    assert set(statuses(plan).values()) == {Status.PLANNED_DELETE}

    (results / name_of(vanishing)).unlink()
    replacement = private_file(tmp_path / "replacement", b"not the planned file\n")
    os.replace(replacement, results / name_of(swapped))
    session.journal.prepare(claim_of(late, reference_count=3))

    report = apply_gc(session, plan, when)

    assert statuses(report) == {
        name_of(doomed): Status.DELETED,
        name_of(vanishing): Status.ALREADY_MISSING,
        name_of(swapped): Status.RACE_DETECTED,
        name_of(late): Status.RETAINED_REFERENCED,
    }
    assert report.counts == {
        "already_missing": 1,
        "deleted": 1,
        "race_detected": 1,
        "retained_referenced": 1,
    }
    for decision in report.decisions:
        assert_readable(decision, tmp_path)
    assert by_name(report)[name_of(late)].reference_count == 3
    assert_path_free(report.to_dict(), session_dir, tmp_path)
    assert sorted(os.listdir(results)) == sorted([name_of(swapped), name_of(late)])
    assert (results / name_of(swapped)).read_bytes() == b"not the planned file\n"
    assert state_of(session, name_of(doomed)) == "deleted"
    assert state_of(session, name_of(vanishing)) == "lost"
    assert state_of(session, name_of(swapped)) == "sealed"
    assert state_of(session, name_of(late)) == "sealed"
    assert quarantine_of(session_dir) == []
    assert_sentinel_intact(sentinel)

    # A file put back at a deleted artifact's name is not ours any more.
    restored = private_file(results / name_of(doomed), b"restored from a backup\n")
    set_mtime(restored, when - timedelta(days=30))
    again = plan_gc(session, policy=deleting(), now=when)
    assert statuses(again)[name_of(doomed)] is Status.RETAINED_UNKNOWN
    assert statuses(again)[name_of(vanishing)] is Status.MISSING
    assert_readable(by_name(again)[name_of(doomed)])
    apply_gc(session, again, when)
    assert restored.read_bytes() == b"restored from a backup\n"


def test_a_plan_of_another_session_is_refused(
    session: Session, tmp_path: Path, clock: FakeClock
) -> None:
    ref = stored(session, "mine")
    when = clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    with open_session(tmp_path / "session-b", clock=clock) as other:
        theirs = stored(other, "theirs")
        with pytest.raises(ArtifactRetentionError, match="session"):
            other.externalizer.apply_cleanup_from_journal(plan, other.journal, now=when)
        with pytest.raises(ArtifactRetentionError, match="session"):
            session.externalizer.apply_cleanup_from_journal(
                plan, other.journal, now=when
            )
        with pytest.raises(ArtifactRetentionError, match="session"):
            session.externalizer.plan_cleanup_from_journal(
                other.journal, policy=deleting(), now=when
            )
        assert state_of(other, name_of(theirs)) == "sealed"
    assert state_of(session, name_of(ref)) == "sealed"
    assert os.path.exists(ref.path)

    # A session with the same id elsewhere: the frozen inode tells the files apart.
    (tmp_path / "elsewhere").mkdir()
    with open_session(tmp_path / "elsewhere" / "session-a", clock=clock) as twin:
        twin_ref = stored(twin, "twin")
        assert name_of(twin_ref) == name_of(ref)
        report = apply_gc(twin, plan, when)
        assert statuses(report) == {name_of(ref): Status.RACE_DETECTED}
        assert os.path.exists(twin_ref.path)
        assert state_of(twin, name_of(twin_ref)) == "sealed"


def test_a_plan_round_trips_through_json_and_refuses_paths(
    session: Session, session_dir: Path
) -> None:
    ref = stored(session, "round trip")
    committed(session, stored(session, "kept"))
    when = session.clock.now() + OLD
    plan = plan_gc(session, policy=deleting(max_deletions=5), now=when)
    revived = ArtifactCleanupPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert revived == plan
    assert revived.to_dict() == plan.to_dict()
    report = apply_gc(session, revived, when)
    assert statuses(report) == {name_of(ref): Status.DELETED}

    for forged in (
        "../tool_result_001.txt",
        "tool-results/tool_result_001.txt",
        str(session_dir / "tool-results" / "tool_result_001.txt"),
        "/etc/passwd",
        "tool_result_001.txt\x00",
    ):
        data = plan.to_dict()
        data["decisions"][0]["filename"] = forged
        with pytest.raises(ArtifactRetentionError, match="path"):
            ArtifactCleanupPlan.from_dict(data)
    for broken in ({}, {"session_id": "x"}, {**plan.to_dict(), "planned_at": "soon"}):
        with pytest.raises(ArtifactRetentionError):
            ArtifactCleanupPlan.from_dict(broken)


HOSTILE_TTLS = [math.nan, math.inf, -math.inf, -1, -1e-9, 10**100, 1e300, True, "3600"]
HOSTILE_TTLS += [None, pytest.param(10**5000, id="10**5000")]


@pytest.mark.parametrize("ttl", HOSTILE_TTLS)
def test_a_ttl_that_is_no_duration_is_refused_before_anything_is_planned(
    session: Session, ttl: object
) -> None:
    # A NaN TTL compared false with every age: a fresh artifact was deleted.
    fresh = stored(session, "fresh")
    with pytest.raises(ArtifactRetentionError, match="orphan_ttl_seconds"):
        ArtifactCleanupPolicy(orphan_ttl_seconds=ttl, dry_run=False)  # type: ignore[arg-type]
    plan = plan_gc(session, policy=deleting(), now=session.clock.now())
    assert statuses(plan) == {name_of(fresh): Status.RETAINED_RECENT}
    # nor can a plan carry one in (a plan file's JSON may well say NaN)
    data = plan.to_dict()
    data["policy"]["orphan_ttl_seconds"] = ttl
    with pytest.raises(ArtifactRetentionError, match="orphan_ttl_seconds"):
        ArtifactCleanupPlan.from_dict(data)
    assert os.path.exists(fresh.path)


@pytest.mark.parametrize(
    "count",
    [
        math.inf,
        math.nan,
        "9" * 5000,
        True,
        -1,
        2**63,
        "3",
        1.0,
        pytest.param(10**5000, id="10**5000"),
    ],
)
def test_a_plan_with_a_count_that_is_no_count_is_refused(
    session: Session, count: object
) -> None:
    stored(session, "counted")
    data = plan_gc(session, policy=deleting(), now=session.clock.now()).to_dict()
    data["decisions"][0]["reference_count"] = count
    with pytest.raises(ArtifactRetentionError, match="reference_count"):
        ArtifactCleanupPlan.from_dict(data)


@pytest.mark.parametrize("forged", [".", ".."])
def test_a_plan_refuses_dot_names(session: Session, forged: str) -> None:
    stored(session, "dots")
    plan = plan_gc(session, policy=deleting(), now=session.clock.now() + OLD).to_dict()
    plan["decisions"][0]["filename"] = forged
    with pytest.raises(ArtifactRetentionError):
        ArtifactCleanupPlan.from_dict(plan)


def test_a_forged_plan_deletes_nothing_it_may_not(
    session: Session, session_dir: Path, sentinel: Path
) -> None:
    results = session_dir / "tool-results"
    protected = stored(session, "protected")
    committed(session, protected)
    notes = private_file(results / "notes.txt", b"notes\n")
    when = session.clock.now() + OLD
    set_mtime(notes, when - timedelta(days=30))
    data = plan_gc(session, policy=deleting(), now=when).to_dict()
    info = notes.lstat()
    for decision in data["decisions"]:
        decision["status"] = "planned_delete"  # protected and unknown alike
        if decision["filename"] == "notes.txt":
            decision["snapshot"] = {
                "size_bytes": info.st_size,
                "mtime_ns": info.st_mtime_ns,
                "st_dev": info.st_dev,
                "st_ino": info.st_ino,
                "content_sha256": "0" * 64,
            }
    forged = ArtifactCleanupPlan.from_dict(data)
    before = entries(results)
    report = apply_gc(session, forged, when)
    assert Status.DELETED not in statuses(report).values()
    assert statuses(report)[name_of(protected)] is Status.RETAINED_REFERENCED
    assert entries(results) == before
    assert_sentinel_intact(sentinel)


def test_an_artifact_named_file_with_no_event_is_adopted_as_an_orphan(
    session: Session, session_dir: Path, tmp_path: Path
) -> None:
    results = session_dir / "tool-results"
    stored(session, "known")
    # A crash between link and event leaves a file the store has never heard of.
    fresh = private_file(results / "tool_result_042.txt", b"no event for me\n" * 100)
    stale = private_file(results / "tool_result_043.txt", b"nor for me\n" * 100)
    now = session.clock.now()
    set_mtime(stale, now - OLD)
    assert state_of(session, fresh.name) is None

    dry = plan_gc(
        session, policy=ArtifactCleanupPolicy(orphan_ttl_seconds=TTL), now=now
    )
    assert statuses(dry)[fresh.name] is Status.RETAINED_RECENT
    assert statuses(dry)[stale.name] is Status.PLANNED_DELETE
    for name, size in ((fresh.name, 1600), (stale.name, 1100)):
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        assert artifact.state == "orphan"
        content = artifact.stored_content
        assert content is not None
        assert content.size_bytes == size
    assert fresh.exists()
    assert stale.exists()

    report = apply_gc(session, plan_gc(session, policy=deleting(), now=now), now)
    assert statuses(report) == {stale.name: Status.DELETED}
    assert state_of(session, stale.name) == "deleted"
    assert state_of(session, fresh.name) == "orphan"
    assert fresh.read_bytes() == b"no event for me\n" * 100
    later = apply_gc(
        session, plan_gc(session, policy=deleting(), now=now + OLD), now + OLD
    )
    assert by_name(later)[fresh.name].status is Status.DELETED
    assert_path_free(report.to_dict(), tmp_path)


def test_max_deletions_takes_the_oldest_first(
    session: Session, session_dir: Path
) -> None:
    results = session_dir / "tool-results"
    refs = [stored(session, f"n{n}") for n in range(5)]
    now = session.clock.now()
    # ages in days, deliberately out of number order
    ages = {0: 3, 1: 9, 2: 1, 3: 7, 4: 5}
    for index, days in ages.items():
        set_mtime(results / name_of(refs[index]), now - timedelta(days=days))
    plan = plan_gc(session, policy=deleting(max_deletions=2), now=now)
    oldest = {name_of(refs[1]), name_of(refs[3])}
    assert {n for n, s in statuses(plan).items() if s is Status.PLANNED_DELETE} == (
        oldest
    )
    limited = by_name(plan)[name_of(refs[0])]
    assert limited.status is Status.RETAINED_LIMIT
    assert_readable(limited)
    report = apply_gc(session, plan, now)
    assert statuses(report) == dict.fromkeys(oldest, Status.DELETED)
    assert sorted(os.listdir(results)) == sorted(name_of(refs[i]) for i in (0, 2, 4))

    none = plan_gc(session, policy=deleting(max_deletions=0), now=now)
    assert set(statuses(none).values()) == {Status.RETAINED_LIMIT}
    assert apply_gc(session, none, now).decisions == ()


def test_a_dry_run_plan_deletes_nothing(
    session: Session, session_dir: Path, sentinel: Path
) -> None:
    results = session_dir / "tool-results"
    refs = [stored(session, f"dry {n}") for n in range(3)]
    when = session.clock.now() + OLD
    policy = ArtifactCleanupPolicy()  # the default: a dry run
    assert policy.dry_run
    plan = plan_gc(session, policy=policy, now=when)
    assert set(statuses(plan).values()) == {Status.PLANNED_DELETE}
    assert plan.dry_run
    before = entries(results)
    report = apply_gc(session, plan, when)
    assert report.dry_run
    assert report.decisions == ()
    assert sorted(report.untouched) == sorted(name_of(r) for r in refs)
    assert report.to_dict()["dry_run"] is True
    whole = session.externalizer.cleanup_artifacts_from_journal(
        session.journal, policy=ArtifactCleanupPolicy(orphan_ttl_seconds=0), now=when
    )
    assert whole.dry_run
    assert whole.decisions == ()
    assert entries(results) == before
    assert {state_of(session, name_of(r)) for r in refs} == {"sealed"}
    assert quarantine_of(session_dir) == []
    assert_sentinel_intact(sentinel)


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
        assert statuses(report).keys() == {name_of(self.candidate)}
        return report.decisions[0]


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
    assert "put back" in outcome.reason
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
    assert "put back" in outcome.reason
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
    assert real == "tool_result_504.txt"  # numbers above every name present
    when = session.clock.now() + OLD
    before = entries(results)

    plan = plan_gc(session, policy=deleting(), now=when)
    report = apply_gc(session, plan, when)

    assert statuses(report) == {real: Status.DELETED}
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


def test_a_fifo_swapped_in_between_the_check_and_the_move_never_blocks(
    session_dir: Path, clock: FakeClock, sentinel: Path
) -> None:
    fs = gc_children.SwapForFifoFileSystem("tool_result_001.txt")
    with open_session(session_dir, fs=fs, clock=clock) as session:
        ref = stored(session, "swapped at the last moment")
        assert name_of(ref) == fs.name
        when = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=when)
        report = apply_gc(session, plan, when)  # fails after 30 s if it blocks
        assert fs.swapped
        outcome = by_name(report)[fs.name]
        assert outcome.status is Status.RACE_DETECTED
        assert_readable(outcome)
        # S6.2: anything but a regular file is left quarantined, never unlinked.
        (intent,) = quarantine_of(session_dir)
        held = session_dir / ".quarantine" / intent / fs.name
        assert stat.S_ISFIFO(held.lstat().st_mode)
        assert state_of(session, fs.name) == "quarantined"
    with must_finish_within(30), open_session(session_dir, clock=clock) as reopened:
        assert stat.S_ISFIFO(held.lstat().st_mode)
        assert state_of(reopened, fs.name) == "quarantined"
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
    assert "symlink" not in by_name(plan)[path.name].reason


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
    fs = gc_children.FailingRenameFileSystem()
    session = open_session(session_dir, fs=fs, clock=clock)
    refs = [stored(session, tag) for tag in ("first", "second")]
    when = clock.now() + OLD
    plan = plan_gc(session, policy=deleting(), now=when)
    fs.failing = True
    report = apply_gc(session, plan, when)
    fs.failing = False
    assert report.error is not None
    assert name_of(refs[0]) in report.error
    assert report.decisions == ()
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
            assert statuses(report) == expected
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
    fs = gc_children.BlockingUnlinkFileSystem("tool_result_001.txt")
    with open_session(session_dir, fs=fs, clock=clock) as session:
        ref = stored(session, "doomed")
        assert name_of(ref) == fs.name
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
            assert fs.entered.wait(30), "GC never reached the unlink"
            assert lock_is_held(session_dir)
            lease_thread.start()
            lease_thread.join(0.5)
            assert lease_thread.is_alive(), "prepare did not wait for the GC lock"
            assert "lease" not in out
        finally:
            fs.release.set()
            gc_thread.join(30)
            if lease_thread.ident is not None:  # started
                lease_thread.join(30)
        assert not gc_thread.is_alive()
        assert not lease_thread.is_alive()
        report = out["gc"]
        assert isinstance(report, ArtifactCleanupReport), report
        assert statuses(report) == {fs.name: Status.DELETED}
        assert isinstance(out["lease"], ArtifactLeaseJournalError), out["lease"]
        assert session.journal.recover().states == ()
        assert state_of(session, fs.name) == "deleted"
        assert not os.path.exists(ref.path)


def test_a_lease_prepared_before_gc_takes_the_lock_keeps_the_file(
    session_dir: Path, clock: FakeClock
) -> None:
    fs = gc_children.BlockingReadFileSystem("lease-thread")
    with open_session(session_dir, fs=fs, clock=clock) as session:
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
            assert fs.entered.wait(30), "prepare never re-verified the artifact"
            assert lock_is_held(session_dir)
            gc_thread.start()
            gc_thread.join(0.5)
            assert gc_thread.is_alive(), "GC apply did not wait for the lock"
        finally:
            fs.release.set()
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


# ------------------------------------------------ S6.2 + S2.6: a crash at each step


@pytest.fixture(scope="module")
def crash_runs() -> Iterator[Callable[..., int]]:
    """Run `gc_children.apply_then_crash` in a forked child; return its exit code."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=gc_children.crash_server, args=(theirs,))
    server.start()

    def run(*request: object) -> int:
        ours.send(request)
        if not ours.poll(60):
            pytest.fail("the crash child did not finish within 60 s")
        return int(ours.recv())

    try:
        yield run
    finally:
        ours.send(None)
        server.join(30)
        if server.is_alive():
            server.kill()


@dataclass
class CrashWorld:
    """What a crash test planned, and the bytes every artifact must keep."""

    session_dir: Path
    plan: dict[str, Any]
    when: datetime
    doomed: str
    kept: tuple[str, ...]
    data: dict[str, bytes]
    linked: str | None
    elsewhere: Path | None


def build_crash_world(root: Path, clock: FakeClock, *, put_back: bool) -> CrashWorld:
    """Candidates: one to delete, one leased after planning and, with `put_back`,
    one hard-linked outside after planning; plus one protected all along."""
    root.mkdir()
    session_dir = root / "session"
    tags = ["doomed", "late", "protected"] + (["linked"] if put_back else [])
    with open_session(session_dir, clock=clock) as session:
        refs = {tag: stored(session, tag) for tag in tags}
        committed(session, refs["protected"])
        when = clock.now() + OLD
        plan = plan_gc(session, policy=deleting(), now=when)
        assert len(plan.candidates()) == len(tags) - 1
        elsewhere = None
        if put_back:
            elsewhere = root / "hard-link"
            os.link(refs["linked"].path, elsewhere)
        session.journal.prepare(claim_of(refs["late"]))
    return CrashWorld(
        session_dir=session_dir,
        plan=plan.to_dict(),
        when=when,
        doomed=name_of(refs["doomed"]),
        kept=tuple(name_of(refs[t]) for t in tags if t != "doomed"),
        data={name_of(r): Path(r.path).read_bytes() for r in refs.values()},
        linked=name_of(refs["linked"]) if put_back else None,
        elsewhere=elsewhere,
    )


def check_after_recovery(world: CrashWorld, session: Session) -> None:
    """Deleted with its event, or back in place and sealed; never lost, never stuck."""
    results = world.session_dir / "tool-results"
    assert quarantine_of(world.session_dir) == [], "intent dirs left in .quarantine/"
    doomed_state = state_of(session, world.doomed)
    if doomed_state == "deleted":
        assert not (results / world.doomed).exists(), "deleted, yet still present"
    else:
        assert doomed_state == "sealed", f"the candidate is {doomed_state}"
        assert (results / world.doomed).read_bytes() == world.data[world.doomed]
    for name in world.kept:
        assert state_of(session, name) == "sealed", f"{name} is not sealed"
        assert (results / name).read_bytes() == world.data[name], f"{name} changed"
    if world.linked is not None and world.elsewhere is not None:
        assert world.elsewhere.read_bytes() == world.data[world.linked]
    present = set(world.data) - ({world.doomed} if doomed_state == "deleted" else set())
    assert set(os.listdir(results)) == present
    session.journal.verify()
    # Never stuck: the next run finishes the job.
    plan = plan_gc(session, policy=deleting(), now=world.when)
    apply_gc(session, plan, world.when)
    assert state_of(session, world.doomed) == "deleted"
    assert quarantine_of(world.session_dir) == []


def sweep_crashes(
    tmp_path: Path, clock: FakeClock, run: Callable[..., int], *, put_back: bool
) -> tuple[int, list[str]]:
    """Crash apply at operation 1, 2, 3 ... until it finishes; check each recovery.

    Returns how many operations the apply took and what went wrong, by crash.
    """
    failures: list[str] = []
    crash_at = 0
    while True:
        crash_at += 1
        assert crash_at < 500, "apply never finished"
        root = tmp_path / f"crash-{crash_at:03d}"
        world = build_crash_world(root, clock, put_back=put_back)
        note = root / "crashed-at"
        code = run(
            str(world.session_dir), world.plan, world.when.isoformat(), crash_at,
            str(note),
        )  # fmt: skip
        assert code in {0, gc_children.CRASH_EXIT_CODE}, f"the child failed: {code}"
        where = note.read_text() if code else "no crash"
        try:
            with (
                must_finish_within(30),
                open_session(world.session_dir, clock=clock) as session,
            ):
                check_after_recovery(world, session)
        except (AssertionError, ArtifactLeaseJournalError, OSError) as error:
            first = str(error).splitlines()[0] if str(error) else ""
            failures.append(
                f"crash at operation {crash_at}, {where}: "
                f"{type(error).__name__}: {first}"
            )
        if code == 0:
            return crash_at - 1, failures


def test_a_crash_at_each_step_of_apply_is_resolved_by_the_next_open(
    tmp_path: Path, clock: FakeClock, crash_runs: Callable[..., int]
) -> None:
    operations, failures = sweep_crashes(tmp_path, clock, crash_runs, put_back=False)
    assert operations > 20  # the sweep really went through the apply
    assert not failures, "\n".join(failures)


def test_a_crash_at_each_step_of_an_apply_that_puts_a_file_back(
    tmp_path: Path, clock: FakeClock, crash_runs: Callable[..., int]
) -> None:
    operations, failures = sweep_crashes(tmp_path, clock, crash_runs, put_back=True)
    assert operations > 20
    assert not failures, "\n".join(failures)


# ------------------------------------------- fail-closed: damaged or missing state


def test_gc_refuses_a_damaged_journal(
    session: Session, session_dir: Path, clock: FakeClock
) -> None:
    results = session_dir / "tool-results"
    committed(session, stored(session, "leased"))
    stored(session, "unleased")
    journal = session_dir / RETENTION_JOURNAL_NAME
    data = bytearray(journal.read_bytes())
    data[data.index(b'"phase":"prepared"') + 9] ^= 0x01  # one bit, line 1
    journal.write_bytes(bytes(data))
    when = clock.now() + OLD
    before = entries(results)
    with pytest.raises(ArtifactLeaseJournalError):
        plan_gc(session, policy=deleting(), now=when)
    with pytest.raises(ArtifactLeaseJournalError):
        session.externalizer.cleanup_artifacts_from_journal(
            session.journal, policy=deleting(), now=when
        )
    with pytest.raises(ArtifactRetentionError):  # and no way around it (S6.4)
        session.externalizer.cleanup_artifacts([], policy=deleting(), now=when)
    session.close()
    try:
        reopened = open_session(session_dir, clock=clock)
    except ArtifactLeaseJournalError:
        pass  # refused at open: fine too
    else:
        with reopened, pytest.raises(ArtifactLeaseJournalError):
            plan_gc(reopened, policy=deleting(), now=when)
    assert entries(results) == before


@pytest.mark.parametrize("victim", ["events.sqlite3", "session.json"])
def test_gc_refuses_a_missing_store_or_marker_already_at_open(
    session_dir: Path, clock: FakeClock, victim: str
) -> None:
    with open_session(session_dir, clock=clock) as session:
        committed(session, stored(session, "leased"))
        stored(session, "unleased")
    results = session_dir / "tool-results"
    before = entries(results)
    (session_dir / victim).unlink()
    with pytest.raises(ArtifactLeaseJournalError):
        open_session(session_dir, clock=clock)
    with pytest.raises(ArtifactLeaseJournalError):
        ToolResultExternalizer(session_dir)
    with pytest.raises(ArtifactLeaseJournalError):
        ArtifactRetentionJournal(session_dir)
    assert entries(results) == before
    assert not (session_dir / victim).exists()  # never re-created silently


# ----------------------------------------------------- S6.4: the raw-claims path


def test_raw_claims_cleanup_works_on_a_session_without_leases(
    session: Session, session_dir: Path, tmp_path: Path
) -> None:
    ext = session.externalizer
    kept, dropped, late = (stored(session, t) for t in ("kept", "dropped", "late"))
    claims = [claim_of(kept, reference_count=2)]
    when = session.clock.now() + OLD
    plan = ext.plan_cleanup(claims, policy=deleting(), now=when)
    assert statuses(plan) == {
        name_of(kept): Status.RETAINED_REFERENCED,
        name_of(dropped): Status.PLANNED_DELETE,
        name_of(late): Status.PLANNED_DELETE,
    }
    assert by_name(plan)[name_of(kept)].reference_count == 2
    assert_path_free(plan.to_dict(), tmp_path)
    # a claim handed to apply protects too
    report = ext.apply_cleanup(plan, claims=[*claims, claim_of(late)], now=when)
    assert statuses(report) == {
        name_of(dropped): Status.DELETED,
        name_of(late): Status.RETAINED_REFERENCED,
    }
    whole = ext.cleanup_artifacts(claims, policy=deleting(), now=when)
    assert statuses(whole) == {name_of(late): Status.DELETED}
    assert sorted(os.listdir(session_dir / "tool-results")) == [name_of(kept)]
    assert state_of(session, name_of(kept)) == "sealed"
    assert session.journal.recover().states == ()  # still no lease

    with open_session(tmp_path / "session-b") as other:
        foreign = claim_of(stored(other, "foreign"))
    with pytest.raises(ArtifactRetentionError):
        ext.plan_cleanup([foreign], policy=deleting(), now=when)


def test_raw_claims_apply_refuses_a_claim_of_another_session(
    session: Session, tmp_path: Path
) -> None:
    stored(session, "mine")
    when = session.clock.now() + OLD
    plan = session.externalizer.plan_cleanup([], policy=deleting(), now=when)
    with open_session(tmp_path / "session-b") as other:
        foreign = claim_of(stored(other, "theirs"))
    with pytest.raises(ArtifactRetentionError, match="session"):
        session.externalizer.apply_cleanup(plan, claims=[foreign], now=when)


def _lease_ending(session: Session, ref: ArtifactReference, phase: str) -> None:
    """Leave one lease of `ref` in `phase`, through the flows a memory system uses."""
    journal = session.journal

    def rejected() -> None:
        msg = "the owner said no"
        raise ArtifactPublicationRejected(msg)

    def timing_out() -> None:
        raise TimeoutError

    if phase == "prepared":
        with pytest.raises(TimeoutError):
            journal.publish_reference(claim_of(ref), timing_out, transaction_id="tx")
    elif phase == "aborted":
        with pytest.raises(ArtifactPublicationRejected):
            journal.publish_reference(claim_of(ref), rejected, transaction_id="tx")
    else:
        journal.publish_reference(claim_of(ref), lambda: None, transaction_id="tx")
        if phase == "released":
            journal.remove_reference("tx", lambda: None)
    assert session.store.get_lease("tx").phase is ArtifactLeasePhase(phase)


@pytest.mark.parametrize("phase", ["prepared", "committed", "released", "aborted"])
def test_raw_claims_cleanup_is_refused_once_the_store_holds_a_lease_event(
    session_dir: Path, clock: FakeClock, phase: str
) -> None:
    with open_session(session_dir, clock=clock) as session:
        ext = session.externalizer
        ref = stored(session, "leased")
        stored(session, "unleased")
        when = clock.now() + OLD
        plan = ext.plan_cleanup([], policy=deleting(), now=when)  # before any lease
        _lease_ending(session, ref, phase)
        before = entries(session_dir / "tool-results")
        with pytest.raises(ArtifactRetentionError, match="lease"):
            ext.plan_cleanup([], policy=deleting(), now=when)
        with pytest.raises(ArtifactRetentionError, match="lease"):
            ext.apply_cleanup(plan, claims=[], now=when)
        with pytest.raises(ArtifactRetentionError, match="lease"):
            ext.cleanup_artifacts([], policy=deleting(), now=when)
    with open_session(session_dir, clock=clock) as session:  # and after a reopen
        with pytest.raises(ArtifactRetentionError, match="lease"):
            session.externalizer.cleanup_artifacts([], policy=deleting(), now=when)
        assert entries(session_dir / "tool-results") == before


# ------------------------------------------ the seed's defaults (issue 14 §5)


def test_without_a_policy_gc_plans_with_the_seed_default(
    session: Session,
) -> None:
    """policy=None is ArtifactCleanupPolicy(): a one-day TTL, as a dry run."""
    ext = session.externalizer
    young, old = stored(session, "young"), stored(session, "old")
    now = session.clock.now()
    set_mtime(Path(old.path), now - timedelta(days=2))
    for plan in (
        ext.plan_cleanup_from_journal(session.journal, now=now),
        ext.plan_cleanup(now=now),
    ):
        assert plan.dry_run
        assert statuses(plan) == {
            name_of(young): Status.RETAINED_RECENT,
            name_of(old): Status.PLANNED_DELETE,
        }
    for report in (
        ext.cleanup_artifacts_from_journal(session.journal, now=now),
        ext.cleanup_artifacts(now=now),
    ):
        assert report.dry_run
        assert os.path.exists(old.path)


def test_applying_a_raw_claims_plan_without_claims_is_refused_by_name(
    session: Session,
) -> None:
    ext = session.externalizer
    plan = ext.plan_cleanup(now=session.clock.now())
    with pytest.raises(
        ArtifactRetentionError, match="current retention claims are required"
    ):
        ext.apply_cleanup(plan)
