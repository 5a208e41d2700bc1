"""Session creation and opening (S4.4), layout and permissions (S2.1, A1).

The shipped event-store suite (`spillvault.testing.event_stores`) runs here on
the SQLite and in-memory stores; PostgreSQL runs it in test_postgres_store.py.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import stat
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import (
    MARKER_NAME,
    ToolResultExternalizer,
    open_session,
)
from spillvault.adapters.storage.fs import OS_FILESYSTEM, OsFileSystem
from spillvault.adapters.storage.memory_store import MemoryBackend, forget_memory_store
from spillvault.adapters.storage.sqlite_store import STORE_NAME, SQLiteBackend
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactSessionNotFoundError,
)
from spillvault.testing import event_stores as event_store_conformance

from support.fakes import FakeClock, RecordingFileSystem
from support.intercept import InterceptingFS
from support.leases import T0, transaction
from support.tiers import HANG_GUARD_SECONDS
from support.workers import create_and_prepare

if TYPE_CHECKING:
    from pathlib import Path
    from uuid import UUID


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# the shipped event-store suite -------------------------------------------------


class TestSQLiteEventStore(event_store_conformance.EventStoreTestCase):
    prepared_at = T0

    def session_kwargs(self) -> dict[str, Any]:
        return {}  # the default store

    def create_backend(self, session_dir: str, store_id: UUID) -> SQLiteBackend:
        return SQLiteBackend(
            OS_FILESYSTEM, self.open_directory(session_dir), session_dir
        )

    def remove_store(self, session_dir: str, store_id: str) -> None:
        os.unlink(os.path.join(session_dir, STORE_NAME))


class TestMemoryEventStore(event_store_conformance.EventStoreTestCase):
    prepared_at = T0

    def session_kwargs(self) -> dict[str, Any]:
        return {"event_store": "memory"}

    def create_backend(self, session_dir: str, store_id: UUID) -> MemoryBackend:
        return MemoryBackend(
            OS_FILESYSTEM, self.open_directory(session_dir), session_dir
        )

    def remove_store(self, session_dir: str, store_id: str) -> None:
        # as the process's exit would
        forget_memory_store(
            OS_FILESYSTEM, self.open_directory(session_dir), session_dir
        )


# creation and opening ------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002, 0o000])
def test_a_brand_new_dir_is_created_private_whatever_the_umask(
    session_dir: Path, umask: int
) -> None:
    old = os.umask(umask)
    try:
        with open_session(session_dir) as session:
            assert session.session_id == "session-a"
            assert session.store_kind == "sqlite"
    finally:
        os.umask(old)
    assert sorted(p.name for p in session_dir.iterdir()) == [
        ".lock", ".quarantine", "events.sqlite3", MARKER_NAME, "tool-results",
    ]  # fmt: skip
    for name in ("", "tool-results", ".quarantine"):
        assert mode(session_dir / name) == 0o700, name
    for name in (".lock", "events.sqlite3", MARKER_NAME):
        assert mode(session_dir / name) == 0o600, name


def test_sqlite_store_is_wal_with_full_sync(session_dir: Path) -> None:
    with open_session(session_dir) as session:
        datastore = session.store.recorder.datastore  # type: ignore[attr-defined]
        with datastore.transaction(commit=False) as cursor:
            cursor.execute("PRAGMA journal_mode")
            journal_mode = cursor.fetchone()[0]
            cursor.execute("PRAGMA synchronous")
            synchronous = cursor.fetchone()[0]
    assert journal_mode == "wal"
    assert synchronous == 2  # FULL


def test_missing_marker_beside_artifacts_is_refused(session_dir: Path) -> None:
    open_session(session_dir).close()
    (session_dir / MARKER_NAME).unlink()
    (session_dir / "tool-results" / "tool_result_001.txt").write_bytes(b"evidence")
    with pytest.raises(ArtifactLeaseJournalError, match="artifacts"):
        open_session(session_dir)


def test_missing_marker_and_store_beside_a_journal_is_refused(
    session_dir: Path,
) -> None:
    open_session(session_dir).close()
    (session_dir / MARKER_NAME).unlink()
    (session_dir / "events.sqlite3").unlink()
    (session_dir / "retention-leases.jsonl").write_text("")
    with pytest.raises(ArtifactLeaseJournalError, match="a journal"):
        open_session(session_dir)
    assert not (session_dir / "events.sqlite3").exists()


def test_another_sessions_store_swapped_in_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    open_session(a).close()
    open_session(b).close()
    for suffix in ("", "-wal", "-shm"):
        (a / f"events.sqlite3{suffix}").unlink(missing_ok=True)
    os.link(b / "events.sqlite3", a / "events.sqlite3")
    with pytest.raises(ArtifactLeaseJournalError, match="event store mismatch"):
        open_session(a)


def test_a_store_symlink_is_refused(tmp_path: Path) -> None:
    a = tmp_path / "a"
    open_session(a).close()
    (a / "events.sqlite3").unlink()
    (a / "events.sqlite3").symlink_to(tmp_path / "elsewhere.sqlite3")
    with pytest.raises(ArtifactAccessError, match="not a regular file"):
        open_session(a)
    assert not (tmp_path / "elsewhere.sqlite3").exists()


class FailingMarkerWrite(OsFileSystem):
    """Dies (EIO) when the marker is created, as a crash before the marker would."""

    @staticmethod
    def open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[override]
        if MARKER_NAME in path and flags & os.O_CREAT:
            raise OSError(errno.EIO, "injected crash before the marker")
        return os.open(path, flags, mode, dir_fd=dir_fd)


def test_creation_interrupted_before_the_marker_is_finished_on_next_open(
    session_dir: Path,
) -> None:
    with pytest.raises(OSError, match="injected crash"):
        open_session(session_dir, fs=FailingMarkerWrite())
    assert (session_dir / "events.sqlite3").exists()
    assert not (session_dir / MARKER_NAME).exists()
    with open_session(session_dir) as session:
        assert session.store.max_position() == 1  # only the identity
        store_id = session.store_id
    marker = json.loads((session_dir / MARKER_NAME).read_text())
    assert marker["store_id"] == store_id


def test_an_empty_store_file_without_marker_is_finished(session_dir: Path) -> None:
    session_dir.mkdir(mode=0o700)
    fd = os.open(session_dir / "events.sqlite3", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    with open_session(session_dir) as session:
        assert session.store.store_identity() is not None


def test_a_damaged_marker_is_refused(session_dir: Path) -> None:
    open_session(session_dir).close()
    (session_dir / MARKER_NAME).write_text("{not json")
    with pytest.raises(
        ArtifactLeaseJournalError, match=r"marker session\.json is damaged"
    ):
        open_session(session_dir)


def test_a_marker_of_another_session_is_refused(tmp_path: Path) -> None:
    open_session(tmp_path / "old-name").close()
    (tmp_path / "old-name").rename(tmp_path / "new-name")
    with pytest.raises(ArtifactLeaseJournalError, match="names session 'old-name'"):
        open_session(tmp_path / "new-name")


def test_a_marker_symlink_is_refused(tmp_path: Path) -> None:
    open_session(tmp_path / "s").close()
    real = tmp_path / "s" / MARKER_NAME
    (tmp_path / "copy.json").write_bytes(real.read_bytes())
    real.unlink()
    real.symlink_to(tmp_path / "copy.json")
    with pytest.raises(ArtifactAccessError, match="symlink"):
        open_session(tmp_path / "s")


def test_a_symlinked_session_dir_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ArtifactAccessError, match="symlink"):
        open_session(tmp_path / "link")
    assert list((tmp_path / "real").iterdir()) == []


def test_a_session_dir_open_to_others_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared").chmod(0o750)
    with pytest.raises(ArtifactAccessError, match="open to group or others"):
        open_session(tmp_path / "shared")


@pytest.mark.parametrize("name", ["a:b", "a\x00b"])
def test_invalid_session_ids_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ArtifactAccessError, match="invalid session id"):
        open_session(tmp_path / name)


def test_an_unknown_event_store_value_is_refused(session_dir: Path) -> None:
    with pytest.raises(ValueError, match="event_store must be"):
        open_session(session_dir, event_store="mysql://x")
    assert not session_dir.exists()


def test_memory_store_is_shared_in_process(session_dir: Path) -> None:
    # Once forgotten (a process exit) it is refused: TestMemoryEventStore.
    with open_session(session_dir, event_store="memory") as one:
        one.store.prepare_lease(transaction("session-a", "tx-1"))
        with open_session(session_dir, event_store="memory") as two:
            assert two.store.get_lease("tx-1").state == "prepared"
            assert two.lock is one.lock
            assert two.store is not one.store


def test_every_durable_step_of_creation_goes_through_the_seam(
    session_dir: Path,
) -> None:
    fs = RecordingFileSystem()
    with open_session(session_dir, fs=fs, clock=FakeClock()):
        pass
    assert fs.names("mkdir")[:3] == ["session-a", "tool-results", ".quarantine"]
    opened = fs.names("open")
    marker_tmp = next(
        name for name in opened if name.startswith(f".{MARKER_NAME}.tmp-")
    )
    for name in (".lock", "events.sqlite3"):
        assert name in opened
    assert opened.index(".lock") < opened.index("events.sqlite3")
    assert opened.index("events.sqlite3") < opened.index(marker_tmp)
    # the marker appears whole: its fsynced tmp is linked to the name
    assert fs.names("link") == [marker_tmp]
    assert fs.names("flock")
    assert len(fs.names("fsync")) >= 3
    marker = json.loads((session_dir / MARKER_NAME).read_text())
    assert marker["created_at"] == T0.isoformat()


def test_two_processes_creating_one_session_get_one_session(session_dir: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    workers = [
        context.Process(
            target=create_and_prepare, args=(str(session_dir), tx, start, results)
        )
        for tx in ("tx-a", "tx-b")
    ]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    ids = {results.get(timeout=HANG_GUARD_SECONDS) for _ in range(2)}
    assert len(ids) == 1
    with open_session(session_dir) as session:
        assert session.store_id in ids
        assert session.store.get_lease("tx-a").state == "prepared"
        assert session.store.get_lease("tx-b").state == "prepared"
        # identity + two prepares, plus whatever lease-view saves the closes made
        topics = [note.topic for note in session.store.notifications()]
        assert (
            len([t for t in topics if not t.startswith("spillvault:SessionView")]) == 3
        )


def test_missing_marker_beside_quarantined_files_is_refused(session_dir: Path) -> None:
    open_session(session_dir).close()
    (session_dir / MARKER_NAME).unlink()
    (session_dir / ".quarantine" / "intent-1").mkdir()
    with pytest.raises(ArtifactLeaseJournalError, match="quarantined files"):
        open_session(session_dir)


# ---------------------------------------------- missing parents (issue 15 §4)


def test_a_new_session_makes_its_missing_parents_like_mkdir_p(tmp_path: Path) -> None:
    parents = [
        tmp_path / "var",
        tmp_path / "var" / "lib",
        tmp_path / "var" / "lib" / "a",
    ]
    target = parents[-1] / "run-42"
    fs = InterceptingFS(record={"mkdir", "fsync"})
    with open_session(target, fs=fs) as session:
        session.externalizer.process("hello", "bash")
    for directory in [*parents, target]:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    # Each ancestor is made, then its entry is fsynced into its own parent.
    ops = [(call.op, call.args[0] if call.op == "mkdir" else None) for call in fs.calls]
    assert ops[:6] == [
        ("mkdir", str(parents[0])), ("fsync", None),
        ("mkdir", str(parents[1])), ("fsync", None),
        ("mkdir", str(parents[2])), ("fsync", None),
    ]  # fmt: skip


def test_the_seed_constructor_takes_a_path_whose_parents_are_missing(
    tmp_path: Path,
) -> None:
    target = tmp_path / "sessions" / "deep" / "run-42"
    ext = ToolResultExternalizer(target)
    try:
        assert ext.tool_results_dir == target / "tool-results"
    finally:
        ext.close()
    assert (target / MARKER_NAME).is_file()


def test_opening_an_existing_session_never_makes_parents(tmp_path: Path) -> None:
    target = tmp_path / "nowhere" / "run-42"
    with pytest.raises(ArtifactSessionNotFoundError):
        open_session(target, mode="open")
    assert list(tmp_path.iterdir()) == []
