"""T6: real kernel faults on the journal, lease and GC paths (root only).

Real mounts and real permission checks, no injected errno: a size-limited
tmpfs (ENOSPC mid-spill, mid-stream, mid-journal-append, on open), a tmpfs
with few inodes (ENOSPC on create: tmp file, stream, journal, quarantine
directory), a read-only remount (EROFS for spill, prepare, GC apply, open)
and EACCES for a process without CAP_DAC_OVERRIDE (`setpriv`).

For each: the operation succeeds or raises an `OSError` or one of the
library's own errors naming the problem (never a raw `sqlite3` or
`eventsourcing` exception); nothing is half-written; and once the condition
is lifted (space freed, remounted rw, permissions back) the session reopens
and works: no `.tmp-*` left, no artifact recorded without its file nor file
without its record, every live lease's artifact intact, the journal verifies.

`test_artifact_store.py` and `test_gate.py` already cover the artifact store
alone on a full and a read-only tmpfs; these tests add the journal, the
leases, the owner, GC and reopening. As root they always run; elsewhere they
skip, except in CI (see `support.pgserver.in_ci`), where they fail.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.services.lease_projection import session_projection
from spillvault.adapters.session import Session, open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactCleanupStatus, ArtifactState
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.machines import LEASE_MACHINE
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactReference,
    ArtifactRetentionClaim,
    parse_artifact_source_id,
)

from support.faults import require_root, tmpfs, unavailable
from support.kill_child import owner_rows

pytestmark = pytest.mark.root

MiB = 1 << 20
GC_NOW_AHEAD = timedelta(days=2)
DELETING = ArtifactCleanupPolicy(orphan_ttl_seconds=3600, dry_run=False)
CHECKING = ArtifactCleanupPolicy(orphan_ttl_seconds=3600)
BAD_STATUSES = {
    ArtifactCleanupStatus.DENIED,
    ArtifactCleanupStatus.RETAINED_UNKNOWN,
    ArtifactCleanupStatus.RETAINED_OPEN,
    ArtifactCleanupStatus.RETAINED_CORRUPT,
    ArtifactCleanupStatus.MISSING_REFERENCED,
    ArtifactCleanupStatus.MISSING,
}


# ------------------------------------------------------------------ environment


def remount(mount_point: Path, options: str) -> None:
    gc.collect()
    subprocess.run(
        ["mount", "-o", f"remount,{options}", str(mount_point)],
        check=True,
        capture_output=True,
    )


def fill(mount_point: Path) -> Path:
    """Write a filler file until the tmpfs has no free page left."""
    filler = mount_point / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            with suppress(OSError):
                while True:
                    os.write(fd, b"f" * chunk)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as full:
        (mount_point / "probe").write_bytes(b"p" * 8192)
    assert full.value.errno == errno.ENOSPC
    (mount_point / "probe").unlink(missing_ok=True)
    return filler


def exhaust_inodes(mount_point: Path) -> list[Path]:
    """Create empty files until the tmpfs has no free inode left."""
    made: list[Path] = []
    while True:
        path = mount_point / f"inode-{len(made)}"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            return made
        made.append(path)


def detached(error: BaseException) -> BaseException:
    """Drop the tracebacks of `error` and its chain: their frames pin the mount."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    gc.collect()
    return error


def opening_failure(session_dir: Path) -> BaseException | None:
    """Open and close the session; return what opening raised, if anything."""
    try:
        drop(open_session(session_dir))
    except Exception as error:  # the caller checks the class
        return detached(error)
    return None


def ours(session_dir: Path) -> list[str]:
    """The session's entries, leaving out SQLite's own `-wal`/`-shm` files."""
    return sorted(
        name for name in os.listdir(session_dir) if not name.endswith(("-wal", "-shm"))
    )


def drop(*sessions: Session) -> None:
    """Close sessions and collect them, so no descriptor pins the mount."""
    for session in sessions:
        session.close()
    gc.collect()


# --------------------------------------------------------------------- helpers


def stored(session: Session, tag: str, lines: int = 20_000) -> ArtifactReference:
    return session.externalizer.externalize(f"{tag} output\n" * lines, "bash").artifact


def publish(
    session: Session, owner: SQLiteOwner, ref: ArtifactReference, tx: str
) -> None:
    memory = ref.for_memory()
    session.journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(memory),
        owner.publisher(memory, tx),
        transaction_id=tx,
    )


def gc_now() -> datetime:
    return datetime.now(UTC) + GC_NOW_AHEAD


PHRASES = {
    errno.ENOSPC: (os.strerror(errno.ENOSPC), "disk is full"),
    errno.EROFS: (os.strerror(errno.EROFS), "read-only", "readonly"),
    errno.EACCES: (os.strerror(errno.EACCES),),
}
"""How a message may name each condition (SQLite says "database or disk is full")."""


def names(message: str, code: int) -> bool:
    return any(phrase in message for phrase in PHRASES[code])


def assert_names(error: BaseException, code: int) -> None:
    """The error is ours or an OSError (never a raw driver's), and names `code`."""
    assert isinstance(error, OSError | ArtifactLeaseJournalError), repr(error)
    assert not isinstance(error, sqlite3.Error), repr(error)
    codes = {getattr(error, "errno", None), getattr(error.__cause__, "errno", None)}
    assert code in codes or names(str(error), code), repr(error)


def tmp_leftovers(session_dir: Path) -> list[str]:
    return sorted(
        str(path.relative_to(session_dir))
        for path in session_dir.rglob("*")
        if ".tmp-" in path.name
    )


def journal_lines(session_dir: Path) -> bytes:
    """The journal's complete lines (a torn tail left out)."""
    path = session_dir / RETENTION_JOURNAL_NAME
    data = path.read_bytes() if path.exists() else b""
    return data[: data.rfind(b"\n") + 1]


def check_reopened(
    session_dir: Path,
    owner_path: Path | None = None,
    *,
    event_store: str | None = None,
) -> dict[str, Any]:
    """Reopen (a cold start for SQLite), check nothing is half-done, return facts.

    Recovery reports nothing lost or refused; the journal verifies; every
    artifact recorded sealed/partial has its file with the recorded digest and
    every file in tool-results is a recorded artifact; every live lease's
    artifact is intact (I1); an owner reference is published only for a live
    lease (I3); a dry-run GC plan sees nothing corrupt, unknown or missing;
    and no `.tmp-*` is left anywhere in the session.
    """
    with open_session(session_dir, event_store=event_store) as session:
        assert session.recovery is not None
        report = session.recovery.to_dict()
        assert report["marked_lost"] == report["refused"] == [], report
        verified = session.journal.verify().to_dict()
        records = session_projection(session).artifact_records()
        results = session_dir / "tool-results"
        on_disk = {p.name for p in results.iterdir()}
        assert not [n for n in on_disk if n.startswith(".tmp-")], on_disk
        kept = {
            name
            for name, record in records.items()
            if record.state in {ArtifactState.SEALED, ArtifactState.PARTIAL}
        }
        assert kept == on_disk, (sorted(kept), sorted(on_disk))
        for name in kept:
            data = (results / name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == records[name].content_sha256
        recovered = session.journal.recover()
        live_states = [
            state
            for state in recovered.states
            if state.current_phase in LEASE_MACHINE.live_states
        ]
        for state in live_states:
            claim = state.transaction.claim
            name = parse_artifact_source_id(claim.source_id).filename
            data = (results / name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == claim.content_sha256
        live = {s.transaction.transaction_id for s in live_states}
        if owner_path is not None:
            for tx, row in owner_rows(str(owner_path)).items():
                assert row != "published" or tx in live, (tx, row)
        plan = session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=CHECKING, now=gc_now()
        )
        bad = [d for d in plan.decisions if d.status in BAD_STATUSES]
        assert bad == [], bad
        facts = {
            "recovery": report,
            "journal": verified,
            "live": live,
            "pending": set(recovered.pending_transaction_ids),
            "artifacts": {n: r.state for n, r in records.items()},
        }
    gc.collect()
    assert tmp_leftovers(session_dir) == []
    return facts


def still_works(
    session_dir: Path, owner: SQLiteOwner, tx: str, *, event_store: str | None = None
) -> None:
    """Spill, publish, remove and collect once more, then recheck."""
    with open_session(session_dir, event_store=event_store) as session:
        ref = stored(session, f"after {tx}")
        publish(session, owner, ref, tx)
        session.journal.remove_reference(tx, owner.remover(tx))
        now = gc_now()
        plan = session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=DELETING, now=now
        )
        report = session.externalizer.apply_cleanup_from_journal(
            plan, session.journal, now=now
        )
        assert report.error is None, report
        deleted = {
            d.filename
            for d in report.decisions
            if d.status is ArtifactCleanupStatus.DELETED
        }
        assert os.path.basename(ref.path) in deleted
    check_reopened(session_dir, Path(owner.path), event_store=event_store)


# ----------------------------------------------------------------------- ENOSPC


def test_a_full_disk_mid_spill_and_mid_stream_leaves_nothing_half_written(
    tmp_path: Path,
) -> None:
    """ENOSPC while spilling and streaming (SQLite store, real tmpfs).

    The whole-output spill raises ENOSPC and leaves no tmp file; the gate
    keeps the output (store_failed). A stream that fills the disk keeps what
    it stored and closes as `store_failed` (S2.4), even when the disk is too
    full to record the partial seal: then the next recovery seals it. Once
    the tmpfs is grown, the session reopens and works.
    """
    owner = SQLiteOwner(tmp_path / "owner.sqlite3")
    with tmpfs(tmp_path / "mnt", "size=4m") as mount:
        session_dir = mount / "session-a"
        session = open_session(session_dir)
        kept = stored(session, "kept")
        publish(session, owner, kept, "tx-kept")
        before = sorted(os.listdir(session_dir / "tool-results"))

        with pytest.raises(OSError) as caught:
            session.externalizer.externalize("b" * (6 * MiB), "bash")
        assert_names(caught.value, errno.ENOSPC)
        assert sorted(os.listdir(session_dir / "tool-results")) == before
        text = "g\n" * (3 * MiB)
        assert session.externalizer.process(text, "bash").reason == "store_failed"
        assert sorted(os.listdir(session_dir / "tool-results")) == before

        stream = session.externalizer.open_stream("bash")
        for _ in range(6):
            stream.write(b"s" * 1023 + b"\n")
            stream.write(b"t" * MiB)
        close_error: BaseException | None = None
        try:
            outcome = stream.close()
            assert outcome.reason == "store_failed", outcome.reason
        except ValueError as error:  # checked at the end, after recovery
            close_error = detached(error)
        drop(session)
        del session, stream, caught  # nothing may pin the mount

        remount(mount, "size=64m")  # the space comes back
        facts = check_reopened(session_dir, tmp_path / "owner.sqlite3")
        partial = [n for n, s in facts["artifacts"].items() if s == "partial"]
        assert len(partial) == 1, facts["artifacts"]
        assert facts["live"] == {"tx-kept"}
        still_works(session_dir, owner, "tx-after")

    assert close_error is None, (
        "S2.4: a stream that hit a full disk must close as store_failed; "
        f"close() raised {close_error!r}"
    )


@pytest.mark.parametrize("event_store", ["memory", None], ids=["memory", "sqlite"])
def test_a_full_disk_mid_journal_append_poisons_the_writer_and_reopens(
    tmp_path: Path, event_store: str | None
) -> None:
    """ENOSPC on the lease path: the journal append (memory store) or the store.

    With the memory store the journal is the only file a lease event writes,
    so publications on a full tmpfs fail exactly at the journal append, once
    the journal's last page is used up (the kernel first writes what fits: a
    torn tail). The writer is then poisoned (J4), even after space comes back,
    and the owner is never asked to publish an unjournaled PREPARED. With the
    SQLite store the store fails first and nothing is recorded. After freeing
    the space a reopen catches the journal up (keeping a torn tail aside, J6)
    and reconciliation settles the interrupted lease.
    """
    owner_path = tmp_path / "owner.sqlite3"
    owner = SQLiteOwner(owner_path)
    with tmpfs(tmp_path / "mnt", "size=2m") as mount:
        session_dir = mount / "session-a"
        session = open_session(session_dir, event_store=event_store)
        ref = stored(session, "published")
        publish(session, owner, ref, "tx-0")
        filler = fill(mount)
        acked = journal_lines(session_dir)
        failed: str | None = None
        for number in range(1, 40):
            try:
                publish(session, owner, ref, f"tx-{number}")
            except (OSError, ArtifactLeaseJournalError) as error:
                assert_names(error, errno.ENOSPC)
                failed = f"tx-{number}"
                break
            acked = journal_lines(session_dir)
        assert failed is not None, "the journal never ran out of space"
        assert journal_lines(session_dir).startswith(acked)
        complete = journal_lines(session_dir)
        torn = (session_dir / RETENTION_JOURNAL_NAME).read_bytes()[len(complete) :]
        lease = session.store.find_lease(failed)
        rows = owner_rows(str(owner_path))
        if event_store == "memory":
            assert lease is not None, "the memory store recorded the event first"
            with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
                session.journal.sync()
        if lease is None or lease.phase.value == "prepared":
            assert failed not in rows, "the owner was asked before the journal"
        filler.unlink()
        if event_store == "memory":  # J4: space alone does not cure a poisoned writer
            with pytest.raises(ArtifactLeaseJournalError, match="poisoned"):
                session.journal.sync()
        drop(session)
        del session

        facts = check_reopened(session_dir, owner_path, event_store=event_store)
        if torn:  # the kernel wrote what fitted: that tail was kept aside (J6)
            aside = session_dir / f"{RETENTION_JOURNAL_NAME}.torn-{len(complete)}"
            assert aside.read_bytes() == torn
        with open_session(session_dir, event_store=event_store) as session:
            reports = session.journal.reconcile_pending(owner)
            assert {r.transaction_id for r in reports} == facts["pending"]
            assert all(r.status.value in {"committed", "aborted"} for r in reports)
        gc.collect()
        after = check_reopened(session_dir, owner_path, event_store=event_store)
        assert after["pending"] == set()
        assert journal_lines(session_dir).startswith(acked)
        still_works(session_dir, owner, "tx-after", event_store=event_store)


# ------------------------------------------------------------------------ inodes


def test_inode_exhaustion_fails_every_create_cleanly_then_recovers(
    tmp_path: Path,
) -> None:
    """ENOSPC on create: tmp file, stream, journal file, quarantine directory.

    Two SQLite sessions share a tmpfs with few inodes; `session-b` has no
    journal yet. With every inode used: a spill and a stream fail with
    ENOSPC and leave nothing; publishing in `session-b` records PREPARED but
    cannot create the journal (poisoned, the owner never called); GC apply
    cannot create its quarantine directory, reports the error and leaves the
    candidate in place, still sealed. Once inodes are freed both sessions
    reopen, the journal is caught up, the lease is aborted, and GC deletes.
    """
    owner_path, owner_b_path = (
        tmp_path / "owner-a.sqlite3",
        tmp_path / "owner-b.sqlite3",
    )
    owner, owner_b = SQLiteOwner(owner_path), SQLiteOwner(owner_b_path)
    with tmpfs(tmp_path / "mnt", "size=16m,nr_inodes=64") as mount:
        dir_a, dir_b = mount / "session-a", mount / "session-b"
        session_a, session_b = open_session(dir_a), open_session(dir_b)
        kept = stored(session_a, "kept")
        publish(session_a, owner, kept, "tx-a")
        orphan = stored(session_a, "orphan")
        ref_b = stored(session_b, "b")
        now = gc_now()
        plan = session_a.externalizer.plan_cleanup_from_journal(
            session_a.journal, policy=DELETING, now=now
        )
        planned = [d.filename for d in plan.candidates()]
        assert planned == [os.path.basename(orphan.path)]
        fillers = exhaust_inodes(mount)
        listing = {d: sorted(os.listdir(d / "tool-results")) for d in (dir_a, dir_b)}

        with pytest.raises(OSError) as caught:
            stored(session_a, "no inode")
        assert_names(caught.value, errno.ENOSPC)
        assert session_a.externalizer.process("x\n" * 40_000, "bash").reason == (
            "store_failed"
        )
        with pytest.raises(OSError) as caught:
            session_a.externalizer.open_stream("bash")
        assert_names(caught.value, errno.ENOSPC)
        with pytest.raises(ArtifactLeaseJournalError) as journal_error:
            publish(session_b, owner_b, ref_b, "tx-b")
        assert_names(journal_error.value, errno.ENOSPC)
        assert not (dir_b / RETENTION_JOURNAL_NAME).exists()
        assert "tx-b" not in owner_rows(str(owner_b_path))
        report = session_a.externalizer.apply_cleanup_from_journal(
            plan, session_a.journal, now=now
        )
        assert report.error is not None, report
        assert os.strerror(errno.ENOSPC) in report.error
        assert list(report.untouched) == planned
        assert (dir_a / "tool-results" / planned[0]).exists()
        state = session_a.store.get_artifact(planned[0])
        assert state is not None
        assert state.artifact_state is ArtifactState.SEALED
        assert {d: sorted(os.listdir(d / "tool-results")) for d in listing} == listing
        assert tmp_leftovers(dir_a) == tmp_leftovers(dir_b) == []
        drop(session_a, session_b)
        del session_a, session_b

        for path in fillers:
            path.unlink()
        facts_b = check_reopened(dir_b, owner_b_path)
        assert facts_b["pending"] == {"tx-b"}
        assert facts_b["journal"]["records"] == 1  # caught up from the store
        with open_session(dir_b) as session:
            [report_b] = session.journal.reconcile_pending(owner_b)
            assert report_b.status.value == "aborted"
        assert owner_rows(str(owner_b_path))["tx-b"] == "tombstoned"
        check_reopened(dir_a, owner_path)
        still_works(dir_a, owner, "tx-a2")
        still_works(dir_b, owner_b, "tx-b2")


# ------------------------------------------------------------- opening when full


@pytest.mark.parametrize("condition", ["full", "no_inodes"])
def test_opening_a_session_on_a_full_filesystem_raises_a_typed_error(
    tmp_path: Path, condition: str
) -> None:
    """Opening a closed SQLite session on a full tmpfs fails cleanly, then works.

    SQLite must create its `-wal`/`-shm` files to open the store: on a full
    disk or with no inode left that fails. The caller must get an `OSError`
    or `ArtifactLeaseJournalError` naming the condition, never a raw
    `sqlite3` exception (SPEC, Errors: wrap a library's own exception).
    """
    with tmpfs(tmp_path / "mnt", "size=4m,nr_inodes=256") as mount:
        session_dir = mount / "session-a"
        with open_session(session_dir) as session:
            stored(session, "kept")
        gc.collect()
        fillers = exhaust_inodes(mount) if condition == "no_inodes" else [fill(mount)]
        before = ours(session_dir)
        failure = opening_failure(session_dir)
        for path in fillers:
            path.unlink()
        assert ours(session_dir) == before
        check_reopened(session_dir)
    if failure is not None:  # opening may succeed; failing, it names ENOSPC
        assert_names(failure, errno.ENOSPC)


# --------------------------------------------------------------------- read-only


def test_a_read_only_remount_refuses_spill_prepare_and_gc_then_recovers(
    tmp_path: Path,
) -> None:
    """EROFS for spill, stream, publish, prepare and GC apply (memory store).

    An open SQLite store keeps files open for writing, so the kernel refuses
    to remount read-only (EBUSY); the memory store keeps nothing open between
    operations. Each write fails with EROFS before anything is recorded (the
    session lock's file cannot be opened for writing): no lease appears, the
    owner is never asked, GC reports the error and leaves every candidate.
    Reads still work. After `remount,rw` the same session and a reopened
    one work.
    """
    owner_path = tmp_path / "owner.sqlite3"
    owner = SQLiteOwner(owner_path)
    with tmpfs(tmp_path / "mnt", "size=8m") as mount:
        session_dir = mount / "session-a"
        session = open_session(session_dir, event_store="memory")
        kept = stored(session, "kept")
        publish(session, owner, kept, "tx-kept")
        orphan = stored(session, "orphan")
        now = gc_now()
        plan = session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=DELETING, now=now
        )
        assert [d.filename for d in plan.candidates()] == [
            os.path.basename(orphan.path)
        ]
        journal = (session_dir / RETENTION_JOURNAL_NAME).read_bytes()
        remount(mount, "ro")
        try:
            with pytest.raises(OSError) as caught:
                stored(session, "read-only")
            assert_names(caught.value, errno.EROFS)
            text = "r\n" * 40_000
            assert session.externalizer.process(text, "bash").reason == "store_failed"
            with pytest.raises(OSError) as caught:
                session.externalizer.open_stream("bash")
            assert_names(caught.value, errno.EROFS)
            with pytest.raises(OSError) as caught:
                publish(session, owner, kept, "tx-ro")
            assert_names(caught.value, errno.EROFS)
            claim = ArtifactRetentionClaim.from_memory_reference(kept.for_memory())
            with pytest.raises(OSError) as caught:
                session.journal.prepare(claim, transaction_id="tx-ro-2")
            assert_names(caught.value, errno.EROFS)
            assert session.store.find_lease("tx-ro") is None
            assert session.store.find_lease("tx-ro-2") is None
            assert "tx-ro" not in owner_rows(str(owner_path))
            report = session.externalizer.apply_cleanup_from_journal(
                plan, session.journal, now=now
            )
            assert report.error is not None, report
            assert os.strerror(errno.EROFS) in report.error
            assert report.decisions == plan.decisions  # the run reached none
            assert (
                session_dir / "tool-results" / plan.candidates()[0].filename
            ).exists()
            assert session.externalizer.read_artifact(kept, 0, 2) == (
                "kept output\nkept output"
            )
            assert (session_dir / RETENTION_JOURNAL_NAME).read_bytes() == journal
        finally:
            remount(mount, "rw")
        publish(session, owner, kept, "tx-rw")  # the same session works again
        drop(session)
        del session
        facts = check_reopened(session_dir, owner_path, event_store="memory")
        assert facts["live"] == {"tx-kept", "tx-rw"}
        still_works(session_dir, owner, "tx-after", event_store="memory")


def test_opening_a_sqlite_session_on_a_read_only_remount_fails_cleanly(
    tmp_path: Path,
) -> None:
    """EROFS on open (SQLite store): an error naming it, and nothing changed."""
    owner_path = tmp_path / "owner.sqlite3"
    owner = SQLiteOwner(owner_path)
    with tmpfs(tmp_path / "mnt", "size=8m") as mount:
        session_dir = mount / "session-a"
        with open_session(session_dir) as session:
            publish(session, owner, stored(session, "kept"), "tx-kept")
        gc.collect()
        snapshot = {
            str(p.relative_to(session_dir)): p.read_bytes()
            for p in sorted(session_dir.rglob("*"))
            if p.is_file()
        }
        remount(mount, "ro")
        try:
            failure = opening_failure(session_dir)
        finally:
            remount(mount, "rw")
        assert failure is not None, "a session opened on a read-only filesystem"
        assert_names(failure, errno.EROFS)
        after = {
            str(p.relative_to(session_dir)): p.read_bytes()
            for p in sorted(session_dir.rglob("*"))
            if p.is_file()
        }
        assert after == snapshot
        facts = check_reopened(session_dir, owner_path)
        assert facts["live"] == {"tx-kept"}
        still_works(session_dir, owner, "tx-after")


# ----------------------------------------------------------------------- EACCES

UNPRIVILEGED_STEPS = textwrap.dedent(
    """
    import json, sys
    from datetime import UTC, datetime, timedelta
    from spillvault.adapters.session import open_session
    from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
    from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

    session_dir, owner_path, *steps = sys.argv[1:]
    out = {}

    def attempt(name, call):
        try:
            out[name] = {"ok": call()}
        except BaseException as error:
            cause = error.__cause__
            out[name] = {
                "error": f"{type(error).__module__}.{type(error).__qualname__}",
                "message": str(error),
                "errno": getattr(error, "errno", None) or getattr(cause, "errno", None),
            }
            return False
        return True

    def opened():
        global session
        session = open_session(session_dir)
        return session.recovery.to_dict()

    if attempt("open", opened):
        ext, owner = session.externalizer, SQLiteOwner(owner_path)
        first = next(iter(ext.artifacts()))
        ref = ext.store.reference_for(first)
        memory = ref.for_memory()
        claim = ArtifactRetentionClaim.from_memory_reference(memory)
        now = datetime.now(UTC) + timedelta(days=2)
        policy = ArtifactCleanupPolicy(orphan_ttl_seconds=3600, dry_run=False)

        def collect():
            journal = session.journal
            plan = ext.plan_cleanup_from_journal(journal, policy=policy, now=now)
            report = ext.apply_cleanup_from_journal(plan, journal, now=now)
            return {
                "planned": [d.filename for d in plan.candidates()],
                "outcomes": {
                    d.filename: [d.status.value, d.reason.value]
                    for d in report.decisions
                },
                "error": report.error,
                "untouched": list(report.untouched),
            }

        actions = {
            "spill": lambda: ext.externalize("x\\n" * 40000, "bash").artifact.handle,
            "gate": lambda: ext.process("x\\n" * 40000, "bash").reason,
            "stream": lambda: ext.open_stream("bash").handle,
            "publish": lambda: session.journal.publish_reference(
                claim, owner.publisher(memory, "tx-eacces"), transaction_id="tx-eacces"
            )[0].transaction_id,
            "gc": collect,
        }
        for step in steps:
            attempt(step, actions[step])
        attempt("close", session.close)
    print(json.dumps(out))
    """
)


def run_unprivileged(session_dir: Path, owner_path: Path, *steps: str) -> Any:
    """Run `steps` in a root process without CAP_DAC_OVERRIDE (real EACCES)."""
    require_root()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        unavailable("setpriv (util-linux) is not installed")
    done = subprocess.run(
        [
            setpriv,
            "--bounding-set=-dac_override,-dac_read_search",
            "--inh-caps=-all",
            sys.executable,
            "-c",
            UNPRIVILEGED_STEPS,
            str(session_dir),
            str(owner_path),
            *steps,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def assert_step_names(result: dict[str, Any], code: int) -> None:
    """Like `assert_names`, for a step run in the unprivileged process."""
    assert "error" in result, result
    assert result["error"].startswith(("builtins.", "spillvault.")), result
    assert result["errno"] == code or names(result["message"], code), result


@pytest.mark.parametrize("unwritable", ["tool-results", ".quarantine"])
def test_eacces_refuses_spill_and_gc_cleanly_then_recovers(
    tmp_path: Path, unwritable: str
) -> None:
    """EACCES without CAP_DAC_OVERRIDE: tool-results or .quarantine unwritable.

    `tool-results` 0500: a spill and a stream fail with EACCES, the gate keeps
    the output, GC cannot move the candidate out and reports it. `.quarantine`
    0500: spills work, GC cannot create its intent directory and reports it.
    Nothing is half-done; with the mode restored GC deletes what it planned.
    """
    owner_path = tmp_path / "owner.sqlite3"
    owner = SQLiteOwner(owner_path)
    session_dir = tmp_path / "session-a"
    with open_session(session_dir) as session:
        orphan = os.path.basename(stored(session, "orphan").path)
    gc.collect()
    target = session_dir / unwritable
    target.chmod(0o500)
    try:
        steps = run_unprivileged(
            session_dir, owner_path, "spill", "gate", "stream", "gc"
        )
    finally:
        target.chmod(0o700)
    assert "ok" in steps["open"], steps
    assert "ok" in steps["close"], steps
    collected = steps["gc"]["ok"]
    assert collected["planned"][0] == orphan, collected  # the oldest goes first
    # The refusal stops the run: the rest stay planned, untouched.
    assert collected["untouched"] == collected["planned"][1:], collected
    assert collected["outcomes"][orphan] == ["denied", "artifact_delete_denied"]
    assert os.strerror(errno.EACCES) in collected["error"], collected
    assert (session_dir / "tool-results" / orphan).exists()
    if unwritable == "tool-results":
        assert_step_names(steps["spill"], errno.EACCES)
        assert_step_names(steps["stream"], errno.EACCES)
        assert steps["gate"] == {"ok": "store_failed"}
    else:
        assert "ok" in steps["spill"], steps
        assert steps["gate"] == {"ok": "spilled"}
    facts = check_reopened(session_dir, owner_path)
    assert facts["artifacts"][orphan] is ArtifactState.SEALED
    still_works(session_dir, owner, "tx-after")


def test_eacces_on_the_session_dir_refuses_the_journal_cleanly(
    tmp_path: Path,
) -> None:
    """EACCES creating the journal: PREPARED is in the store, the owner untouched.

    Another process (the test) keeps the session open, so SQLite's `-wal` and
    `-shm` files exist and the unprivileged process can open the store; the
    session directory is 0500, so the journal cannot be created. Publishing
    fails naming EACCES and never calls the owner; once the mode is back a
    reopen catches the journal up and reconciliation aborts the lease.
    """
    owner_path = tmp_path / "owner.sqlite3"
    owner = SQLiteOwner(owner_path)
    session_dir = tmp_path / "session-a"
    holder = open_session(session_dir)
    stored(holder, "kept")
    session_dir.chmod(0o500)
    try:
        steps = run_unprivileged(session_dir, owner_path, "publish")
    finally:
        session_dir.chmod(0o700)
        drop(holder)
        del holder
    assert "ok" in steps["open"], steps
    assert_step_names(steps["publish"], errno.EACCES)
    assert steps["publish"]["error"].endswith("ArtifactLeaseJournalError"), steps
    assert "tx-eacces" not in owner_rows(str(owner_path))
    facts = check_reopened(session_dir, owner_path)
    assert facts["pending"] == {"tx-eacces"}
    assert facts["journal"]["records"] == 1
    with open_session(session_dir) as session:
        [report] = session.journal.reconcile_pending(owner)
        assert report.status.value == "aborted"
    gc.collect()
    assert owner_rows(str(owner_path))["tx-eacces"] == "tombstoned"
    still_works(session_dir, owner, "tx-after")


def test_opening_a_session_whose_directory_is_not_writable_raises_a_typed_error(
    tmp_path: Path,
) -> None:
    """EACCES on open: SQLite cannot create `-wal`/`-shm` in a 0500 session dir.

    The caller must get an `OSError` or `ArtifactLeaseJournalError` naming
    the problem, never a raw `sqlite3` exception (SPEC, Errors).
    """
    owner_path = tmp_path / "owner.sqlite3"
    SQLiteOwner(owner_path)
    session_dir = tmp_path / "session-a"
    with open_session(session_dir) as session:
        stored(session, "kept")
    gc.collect()
    before = sorted(os.listdir(session_dir))
    session_dir.chmod(0o500)
    try:
        steps = run_unprivileged(session_dir, owner_path)
    finally:
        session_dir.chmod(0o700)
    assert sorted(os.listdir(session_dir)) == before
    check_reopened(session_dir, owner_path)
    assert "error" in steps["open"], steps
    assert steps["open"]["error"].startswith(("builtins.", "spillvault.")), steps
    assert "ermission" in steps["open"]["message"] or steps["open"]["errno"] == (
        errno.EACCES
    ), steps
