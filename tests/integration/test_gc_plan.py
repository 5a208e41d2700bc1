"""GC planning and applying (S6.1, S6.4): the plan table, apply outcomes, defaults."""

from __future__ import annotations

import json
import math
import os
import socket
import stat
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.session import (
    Session,
    open_session,
)
from spillvault.domain.cleanup import (
    ArtifactCleanupPlan,
)
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import (
    ArtifactPublicationRejected,
    ArtifactRetentionError,
)
from spillvault.domain.handles import parse_handle
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactReference,
)

from support.gc_world import (
    OLD,
    TTL,
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
    name_of,
    plan_gc,
    private_file,
    quarantine_of,
    set_mtime,
    state_of,
    statuses,
    stored,
)

if TYPE_CHECKING:
    from support.fakes import FakeClock

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
    handle = parse_handle(stream.handle)
    assert handle is not None
    expected[handle.filename] = Status.RETAINED_OPEN

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
    reasons = {
        status: {by_name(plan)[n].reason for n, s in expected.items() if s is status}
        for status in set(expected.values())
    }
    assert reasons == {
        Status.DENIED: {
            "symbolic_link_not_owned",  # a-symlink, tool_result_901.txt
            "artifact_not_a_regular_file",
        },
        Status.RETAINED_UNKNOWN: {"cleanup_plan_filename_not_owned"},
        Status.RETAINED_OPEN: {"artifact_still_being_written"},
        Status.RETAINED_CORRUPT: {
            "retention_claim_digest_mismatch",  # changed-live, changed-expired
            "artifact_differs_from_record",  # changed: no claim, only its record
        },
        Status.RETAINED_REFERENCED: {"active_memory_retention_claim"},
        Status.RETAINED_RECENT: {"unreferenced_artifact_within_orphan_ttl"},
        Status.RETAINED_LIMIT: {"cleanup_deletion_limit_reached"},
        Status.PLANNED_DELETE: {"expired_unreferenced_artifact"},
        Status.MISSING_REFERENCED: {"active_retention_claim_has_no_artifact"},
        Status.MISSING: {"unreferenced_artifact_missing"},
    }
    assert by_name(plan)["a-symlink"].reason == "symbolic_link_not_owned"
    assert by_name(plan)[name_of(changed)].reason == "artifact_differs_from_record"
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
    assert applied(report, plan) == {name_of(older_old): Status.DELETED}
    assert statuses(report) == expected | {name_of(older_old): Status.DELETED}
    counted = {s: n for s, n in plan.counts.items() if s != "planned_delete"}
    assert report.counts == counted | {"deleted": 1}  # over every decision
    assert report.to_dict()["planned_at"] == plan.to_dict()["planned_at"]
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

    assert applied(report, plan) == {
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
    assert {n: d.reason for n, d in by_name(report).items()} == {
        name_of(doomed): "expired_unreferenced_artifact_deleted",
        name_of(vanishing): "artifact_already_missing",
        name_of(swapped): "artifact_changed_after_cleanup_plan",
        name_of(late): "active_claim_added_after_cleanup_plan",
    }
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
    assert_readable(by_name(again)[name_of(vanishing)])
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
        assert applied(report, plan) == {name_of(ref): Status.RACE_DETECTED}
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
    assert applied(report, revived) == {name_of(ref): Status.DELETED}

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
    not_ours = by_name(report)["notes.txt"]
    assert (not_ours.status, not_ours.reason) == (
        Status.DENIED,
        "cleanup_plan_filename_not_owned",
    )
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

    plan = plan_gc(session, policy=deleting(), now=now)
    report = apply_gc(session, plan, now)
    assert applied(report, plan) == {stale.name: Status.DELETED}
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
    assert applied(report, plan) == dict.fromkeys(oldest, Status.DELETED)
    assert sorted(os.listdir(results)) == sorted(name_of(refs[i]) for i in (0, 2, 4))

    none = plan_gc(session, policy=deleting(max_deletions=0), now=now)
    assert set(statuses(none).values()) == {Status.RETAINED_LIMIT}
    assert apply_gc(session, none, now).decisions == none.decisions


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
    assert report.decisions == plan.decisions  # every one still planned
    assert sorted(report.untouched) == sorted(name_of(r) for r in refs)
    assert report.to_dict()["dry_run"] is True
    whole = session.externalizer.cleanup_artifacts_from_journal(
        session.journal, policy=ArtifactCleanupPolicy(orphan_ttl_seconds=0), now=when
    )
    assert whole.dry_run
    assert set(statuses(whole).values()) == {Status.PLANNED_DELETE}
    assert entries(results) == before
    assert {state_of(session, name_of(r)) for r in refs} == {"sealed"}
    assert quarantine_of(session_dir) == []
    assert_sentinel_intact(sentinel)


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
    assert applied(report, plan) == {
        name_of(dropped): Status.DELETED,
        name_of(late): Status.RETAINED_REFERENCED,
    }
    whole = ext.cleanup_artifacts(claims, policy=deleting(), now=when)
    assert statuses(whole) == {
        name_of(kept): Status.RETAINED_REFERENCED,
        name_of(late): Status.DELETED,
    }
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
