"""The local artifact store: storing, publishing, streaming, handles (S2, A1-A4).

The shipped artifact-store suite (`spillvault.testing.artifact_stores`) runs
here as `TestLocalArtifactStore`; the tests after it are what only a local
filesystem shows: permissions, symlinks, flocks, the seam's faults, full disks.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import subprocess
import sys
import textwrap
import threading
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.artifact_store import TMP_PREFIX, LocalArtifactStore
from spillvault.adapters.storage.content_writer import OVERLAP_MIN, ContentHasher
from spillvault.adapters.storage.fs import OsFileSystem
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import ArtifactAccessError
from spillvault.testing import artifact_stores as artifact_store_conformance
from spillvault.testing.artifact_stores import PAYLOADS, pieces
from spillvault.testing.artifact_stores import expected_content as expected

from support.fakes import FakeClock
from support.faults import require_root
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session

MiB = CHUNK_SIZE


# helpers ---------------------------------------------------------------------


class FaultyFS(OsFileSystem):
    """The real seam, with an errno injected into one operation once armed."""

    def __init__(self) -> None:
        self.faults: dict[str, list[int]] = {}
        self.partial_write: int | None = None

    def arm(self, operation: str, err: int, *, after: int = 0) -> None:
        """Fail `operation` with `err` after `after` successful calls."""
        self.faults[operation] = [after, err]

    def disarm(self) -> None:
        self.faults.clear()

    def _check(self, operation: str) -> None:
        fault = self.faults.get(operation)
        if fault is None:
            return
        if fault[0] > 0:
            fault[0] -= 1
            return
        raise OSError(fault[1], os.strerror(fault[1]))

    def write(self, fd: int, data: bytes) -> int:  # type: ignore[override]
        fault = self.faults.get("write")
        if fault is not None and fault[0] == 0 and self.partial_write is not None:
            # A short write first (some bytes land), then the error.
            size, self.partial_write = self.partial_write, None
            return os.write(fd, data[:size])
        self._check("write")
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:  # type: ignore[override]
        self._check("fsync")
        os.fsync(fd)

    def link(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._check("link")
        OsFileSystem.link(*args, **kwargs)


def results(session_dir: Path) -> list[str]:
    return sorted(os.listdir(session_dir / "tool-results"))


def artifact_events(session: Session) -> list[str]:
    return [
        note.topic
        for note in session.store.notifications()
        if note.topic.startswith("spillvault:Artifact.")
    ]


def read_fd(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, MiB):
        parts.append(chunk)
    return b"".join(parts)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def session(session_dir: Path) -> Iterator[Session]:
    with open_session(session_dir, event_store="memory", clock=FakeClock()) as opened:
        yield opened


@pytest.fixture
def store(session: Session) -> Iterator[LocalArtifactStore]:
    with LocalArtifactStore(session) as opened:
        yield opened


# the shipped artifact-store suite ----------------------------------------------


class TestLocalArtifactStore(artifact_store_conformance.ArtifactStoreTestCase):
    def create_clock(self) -> FakeClock:
        return FakeClock()

    def create_store(self, session: Session) -> LocalArtifactStore:
        return LocalArtifactStore(session)

    def stored_names(self, session: Session) -> list[str]:
        return sorted(os.listdir(os.path.join(session.path, "tool-results")))

    def delete_content(self, session: Session, filename: str) -> None:
        os.unlink(os.path.join(session.path, "tool-results", filename))

    def hostile_handles(self, handle: str, filename: str) -> list[str]:
        base = os.path.dirname(handle)
        outside_link = os.path.join(self.workdir, "link.txt")
        os.symlink(handle, outside_link)
        return [
            *super().hostile_handles(handle, filename),
            f"{base}/../tool-results/{filename}",
            f"{base}//{filename}",
            f"{os.path.dirname(base)}/session.json",
            f"{base}/.tmp-abc",
            f"../{self.session_name}/tool-results/{filename}",
            f"tool-results/{filename}",
            outside_link,
        ]


# the content hasher ------------------------------------------------------------


def test_hasher_agrees_whatever_the_piece_boundaries() -> None:
    data = PAYLOADS["non_utf8"] * 50_000 + b"end"
    for size in (1, 3, 4096, MiB - 1, MiB, MiB + 1, len(data)):
        hasher = ContentHasher()
        for piece in pieces(data, size) if size > 1 else [data[:1], data[1:]]:
            hasher.update(piece)
        content, first = hasher.finish()
        assert content.to_payload() == expected(data), size
        assert first == "\ufffd\ufffd\ufffd caf\ufffd", size


# numbering (S2.2) ------------------------------------------------------------


def test_numbers_survive_reopening_and_stay_above_names_present(
    session_dir: Path,
) -> None:
    with open_session(session_dir) as first, LocalArtifactStore(first) as store:
        assert store.store([b"a"], source_tool="t").filename == "tool_result_001.txt"
    (session_dir / "tool-results" / "tool_result_001.txt").unlink()
    planted = session_dir / "tool-results" / "tool_result_1000.txt"
    with open_session(session_dir) as again, LocalArtifactStore(again) as store:
        assert store.store([b"b"], source_tool="t").filename == "tool_result_002.txt"
        planted.write_bytes(b"someone else's")
        planted.chmod(0o600)
        # Numbers come from the counter, not from listing the directory.
        assert store.store([b"c"], source_tool="t").filename == "tool_result_003.txt"
        # A reserved name found taken: listed once, then above the highest.
        squatter = session_dir / "tool-results" / "tool_result_004.txt"
        squatter.write_bytes(b"copied in")
        squatter.chmod(0o600)
        assert store.store([b"d"], source_tool="t").filename == "tool_result_1001.txt"
        assert store.store([b"e"], source_tool="t").filename == "tool_result_1002.txt"
    assert planted.read_bytes() == b"someone else's"
    assert squatter.read_bytes() == b"copied in"


class CountingListdir(FaultyFS):
    """Counts the listings of a directory."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    def listdir(self, fd: int) -> list[str]:  # type: ignore[override]
        self.listings += 1
        return os.listdir(fd)


def test_storing_does_not_list_the_directory_per_artifact(session_dir: Path) -> None:
    fs = CountingListdir()
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        before = fs.listings
        names = [store.store([b"x"], source_tool="t").filename for _ in range(20)]
        with store.open_stream("t") as stream:
            stream.write(b"y")
        assert fs.listings == before  # numbers come from the counter
    assert names == [f"tool_result_{n:03d}.txt" for n in range(1, 21)]
    assert stream.artifact.filename == "tool_result_021.txt"


# symlinks (A1-A3) ------------------------------------------------------------


def test_a_symlink_planted_at_the_next_name_is_skipped(
    store: LocalArtifactStore, tmp_path: Path, session_dir: Path
) -> None:
    victim = tmp_path / "victim"
    (session_dir / "tool-results" / "tool_result_001.txt").symlink_to(victim)
    artifact = store.store([b"secret"], source_tool="t")
    assert artifact.filename == "tool_result_002.txt"
    assert not victim.exists()


class PlantOnPublish(FaultyFS):
    """Plants a symlink at the name being published, just before `link`/`open`."""

    def __init__(self, victim: Path) -> None:
        super().__init__()
        self.victim = victim
        self.planted: list[str] = []
        self.dir_fd: int | None = None
        self.eexist = 0

    def _plant(self, name: str, dir_fd: int | None) -> None:
        if self.dir_fd is not None and not self.planted and name.startswith("tool_"):
            os.symlink(self.victim, name, dir_fd=dir_fd)
            self.planted.append(name)

    def link(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._plant(args[1], kwargs["dst_dir_fd"])
        try:
            OsFileSystem.link(*args, **kwargs)
        except FileExistsError:
            self.eexist += 1
            raise

    def open(  # type: ignore[override]
        self, path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        if flags & os.O_CREAT:
            self._plant(path, dir_fd)
        try:
            return os.open(path, flags, mode, dir_fd=dir_fd)
        except FileExistsError:
            self.eexist += 1
            raise


@pytest.mark.parametrize("how", ["store", "stream"])
def test_a_symlink_raced_in_at_publish_time_costs_one_number(
    session_dir: Path, tmp_path: Path, how: str
) -> None:
    victim = tmp_path / "victim"
    fs = PlantOnPublish(victim)
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        fs.dir_fd = store.dir_fd
        if how == "store":
            artifact = store.store([b"secret"], source_tool="t")
        else:
            with store.open_stream("t") as stream:
                stream.write(b"secret")
            artifact = stream.artifact
    assert fs.planted == ["tool_result_001.txt"]
    assert fs.eexist == 1
    assert artifact.filename == "tool_result_002.txt"
    assert not victim.exists()
    link = session_dir / "tool-results" / "tool_result_001.txt"
    assert link.is_symlink()
    assert os.readlink(link) == str(victim)
    assert (session_dir / "tool-results" / "tool_result_002.txt").read_bytes() == (
        b"secret"
    )


def test_a_symlinked_tool_results_dir_is_refused(
    session_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    with open_session(session_dir, event_store="memory") as session:
        (session_dir / "tool-results").rename(session_dir / "moved")
        (session_dir / "tool-results").symlink_to(outside)
        with pytest.raises(ArtifactAccessError, match="symlink"):
            LocalArtifactStore(session)
    with pytest.raises(ArtifactAccessError, match="symlink"):
        open_session(session_dir, event_store="memory")
    assert list(outside.iterdir()) == []


def test_a_dir_swapped_for_a_symlink_after_opening_is_not_followed(
    session_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    with (
        open_session(session_dir, event_store="memory") as session,
        LocalArtifactStore(session) as store,
    ):
        (session_dir / "tool-results").rename(session_dir / "moved")
        (session_dir / "tool-results").symlink_to(outside)
        store.store([b"x"], source_tool="t")
    assert list(outside.iterdir()) == []
    assert sorted(os.listdir(session_dir / "moved")) == ["tool_result_001.txt"]


class RecoveryWinsTheRace(OsFileSystem):
    """Removes the first tmp between its creation and its writer's flock."""

    def __init__(self) -> None:
        self.created: list[tuple[str, int | None]] = []
        self.stolen: list[str] = []

    def open(  # type: ignore[override]
        self, path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        fd = os.open(path, flags, mode, dir_fd=dir_fd)
        if flags & os.O_CREAT and path.startswith(TMP_PREFIX):
            self.created.append((path, dir_fd))
        return fd

    def flock(self, fd: int, operation: int) -> None:  # type: ignore[override]
        if operation == fcntl.LOCK_EX and self.created and not self.stolen:
            name, dir_fd = self.created[-1]
            os.unlink(name, dir_fd=dir_fd)  # as a recovery pass holding it would
            self.stolen.append(name)
        fcntl.flock(fd, operation)


def test_a_tmp_removed_before_its_writer_locks_it_is_replaced(
    session_dir: Path,
) -> None:
    fs = RecoveryWinsTheRace()
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        artifact = store.store([b"data"], source_tool="t")
    assert len(fs.stolen) == 1
    assert [name for name, _ in fs.created] == [fs.stolen[0], fs.created[1][0]]
    assert results(session_dir) == [artifact.filename]
    assert (session_dir / "tool-results" / artifact.filename).read_bytes() == b"data"


# permissions (S2.1) ----------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o077])
def test_files_are_0600_and_dirs_0700_whatever_the_umask(
    session_dir: Path, umask: int
) -> None:
    seen_tmp: list[tuple[int, bool]] = []

    class Spy:
        def feed(self, chunk: bytes, newlines: int | None = None) -> None:
            tool_results = session_dir / "tool-results"
            for name in os.listdir(tool_results):
                if name.startswith(TMP_PREFIX):
                    fd = os.open(tool_results / name, os.O_RDONLY)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        locked = False
                    except BlockingIOError:
                        locked = True
                    finally:
                        os.close(fd)
                    seen_tmp.append((mode(tool_results / name), locked))

    old = os.umask(umask)
    try:
        with (
            open_session(session_dir, event_store="memory") as session,
            LocalArtifactStore(session) as store,
        ):
            store.store([b"a"], source_tool="t", key_line_scanner=Spy())
            with store.open_stream("t") as stream:
                stream.write(b"b")
    finally:
        os.umask(old)
    assert seen_tmp == [(0o600, True)]  # private, and flocked while written
    assert mode(session_dir) == 0o700
    assert mode(session_dir / "tool-results") == 0o700
    for name in ("tool_result_001.txt", "tool_result_002.txt"):
        assert mode(session_dir / "tool-results" / name) == 0o600


# hostile handles (S3.2) ------------------------------------------------------


def test_handles_are_session_and_number_and_aliases_resolve_too(
    store: LocalArtifactStore,
) -> None:
    artifact = store.store([b"x"], source_tool="t")
    name = artifact.filename
    handle = store.handle_for(name)
    assert handle == f"{store.session.session_id}/1"
    assert store.resolve(handle) == name
    reference = store.reference_for(artifact)
    assert reference.handle == handle
    # the seed's source id and the absolute path are aliases
    assert store.resolve(reference.source.source_id) == name
    assert store.resolve(os.path.join(store.session.path, "tool-results", name)) == name
    assert str(reference.path) == os.path.join(store.session.path, "tool-results", name)
    other_digest = reference.source.source_id[:-12] + "0" * 12
    with pytest.raises(ArtifactAccessError, match="other content"):
        store.resolve(other_digest)
    for wrong in (
        f"{store.session.session_id}/01",  # one spelling only
        f"{store.session.session_id}/+1",
        f"{store.session.session_id}/1/",
        "another-session/1",
        f"artifact:another-session:{name}:{reference.content_sha256[:12]}",
        "1",
        "tool-results/tool_result_001.txt",
    ):
        with pytest.raises(ArtifactAccessError):
            store.resolve(wrong)
    blob = store.open_for_read(name)  # a bare canonical filename works too
    try:
        assert blob.size == 1
        assert blob.read_at(0, 10) == b"x"
    finally:
        blob.close()


def test_symlinks_fifos_and_loose_files_at_artifact_names_are_refused(
    store: LocalArtifactStore, session_dir: Path
) -> None:
    name = store.store([b"secret"], source_tool="t").filename
    tool_results = session_dir / "tool-results"
    (tool_results / "tool_result_007.txt").symlink_to(tool_results / name)
    os.mkfifo(tool_results / "tool_result_008.txt", 0o600)
    loose = tool_results / "tool_result_009.txt"
    loose.write_bytes(b"x")
    loose.chmod(0o644)
    for bad in ("tool_result_007.txt", "tool_result_008.txt"):
        with pytest.raises(ArtifactAccessError):
            store.resolve(store.handle_for(bad))
    outcome: list[BaseException] = []

    def open_all() -> None:
        for bad in ("tool_result_007.txt", "tool_result_008.txt", loose.name):
            try:
                store.open_for_read(store.handle_for(bad))
            except BaseException as error:
                outcome.append(error)

    opener = threading.Thread(target=open_all, daemon=True)
    opener.start()
    opener.join(HANG_GUARD_SECONDS)  # a blocked open never returns
    assert not opener.is_alive(), "opening a FIFO blocked"
    assert [type(e) for e in outcome] == [ArtifactAccessError] * 3
    assert "symlink" in str(outcome[0])
    assert "not a regular file" in str(outcome[1])
    assert "group or others" in str(outcome[2])


# failures leave nothing (S1.2 rule 5) ----------------------------------------


@pytest.mark.parametrize(
    ("operation", "err", "after"),
    [
        ("write", errno.ENOSPC, 1),
        ("write", errno.EIO, 0),
        ("fsync", errno.EIO, 0),  # the file's fsync
        ("fsync", errno.EIO, 1),  # the directory's fsync after link
        ("link", errno.EROFS, 0),
    ],
)
def test_a_failing_seam_leaves_no_file_and_no_event(
    session_dir: Path, operation: str, err: int, after: int
) -> None:
    fs = FaultyFS()
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        fs.arm(operation, err, after=after)
        with pytest.raises(OSError) as caught:
            store.store(pieces(b"z" * (3 * MiB), MiB), source_tool="t")
        assert caught.value.errno == err
        assert results(session_dir) == []
        assert artifact_events(session) == []
        fs.disarm()
        artifact = store.store([b"fine"], source_tool="t")
    assert results(session_dir) == [artifact.filename]


def test_a_failing_stream_open_leaves_nothing(session_dir: Path) -> None:
    fs = FaultyFS()
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        fs.arm("fsync", errno.EIO)
        with pytest.raises(OSError, match="Input/output"):
            store.open_stream("t")
        assert results(session_dir) == []
        assert artifact_events(session) == []


# streaming (S2.4) ------------------------------------------------------------


class RecordingScanner:
    """A key-line scanner that keeps every chunk it is fed."""

    def __init__(self) -> None:
        self.seen: list[bytes] = []

    def feed(self, chunk: bytes, newlines: int | None = None) -> None:
        assert newlines is None or newlines == chunk.count(b"\n")
        self.seen.append(chunk)


# 5000 bytes are written inline; 3 MiB on the helper thread while hashed (S2.4).
@pytest.mark.parametrize("size", [5000, OVERLAP_MIN, 3 * MiB + 7])
def test_a_write_failure_seals_partial_over_the_bytes_on_disk(
    session_dir: Path, size: int
) -> None:
    fs = FaultyFS()
    scanner = RecordingScanner()
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        stream = store.open_stream("t", key_line_scanner=scanner)
        stream.write(b"first\n")
        stream.write(b"x\n" * size)
        fs.partial_write = 100
        fs.arm("write", errno.ENOSPC)
        with pytest.raises(OSError) as caught:
            stream.write(b"y" * size)
        assert caught.value.errno == errno.ENOSPC
        on_disk = (session_dir / "tool-results" / stream.filename).read_bytes()
        assert on_disk == b"first\n" + b"x\n" * size + b"y" * 100
        assert stream.closed
        assert stream.artifact.state == "partial"
        assert stream.artifact.content == expected(on_disk)
        assert stream.close().state == "partial"
        recorded = session.store.get_artifact(stream.filename)
        assert recorded is not None
        assert recorded.state == "partial"
    # The scanner saw whole written chunks only: never the failed one.
    assert scanner.seen == [b"first\n", b"x\n" * size]


def test_a_failing_close_fsync_seals_partial(session_dir: Path) -> None:
    fs = FaultyFS()
    with (
        open_session(session_dir, event_store="memory", fs=fs) as session,
        LocalArtifactStore(session) as store,
    ):
        stream = store.open_stream("t")
        stream.write(b"abc")
        fs.arm("fsync", errno.EIO)
        with pytest.raises(OSError, match="Input/output"):
            stream.close()
        assert stream.artifact.state == "partial"
        assert stream.artifact.content == expected(b"abc")


# real kernel faults (root only) ----------------------------------------------


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    require_root()
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"running as root but mount failed: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        done = subprocess.run(["umount", str(mount_point)], check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.root
def test_a_full_disk_raises_enospc_and_leaves_nothing(tmpfs: Path) -> None:
    session_dir = tmpfs / "session-a"
    with (
        open_session(session_dir, event_store="memory") as session,
        LocalArtifactStore(session) as store,
    ):
        with pytest.raises(OSError) as caught:
            store.store(pieces(b"q" * (2 * MiB), 64 * 1024), source_tool="t")
        assert caught.value.errno == errno.ENOSPC
        assert results(session_dir) == []
        assert artifact_events(session) == []
        # A stream that hits the full disk keeps what reached it, as partial.
        stream = store.open_stream("t")

        def write_2_mib() -> None:
            for part in pieces(b"r\n" * MiB, 64 * 1024):
                stream.write(part)

        with pytest.raises(OSError) as caught:
            write_2_mib()
        assert caught.value.errno == errno.ENOSPC
        on_disk = (session_dir / "tool-results" / stream.filename).read_bytes()
        assert 0 < len(on_disk) < 2 * MiB
        assert stream.artifact.state == "partial"
        assert stream.artifact.content == expected(on_disk)


@pytest.mark.root
def test_a_read_only_filesystem_raises_erofs_and_leaves_nothing(tmpfs: Path) -> None:
    session_dir = tmpfs / "session-a"
    with (
        open_session(session_dir, event_store="memory") as session,
        LocalArtifactStore(session) as store,
    ):
        kept = store.store([b"before\n"], source_tool="t").filename
        subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
        with pytest.raises(OSError) as caught:
            store.store([b"after\n"], source_tool="t")
        assert caught.value.errno == errno.EROFS
        with pytest.raises(OSError) as caught:
            store.open_stream("t")
        assert caught.value.errno == errno.EROFS
        assert results(session_dir) == [kept]
        assert artifact_events(session) == ["spillvault:Artifact.Stored"]


# bounded memory (S2.4) -------------------------------------------------------

MEMORY_PROBE = textwrap.dedent(
    """
    import os, sys
    from spillvault.adapters.session import open_session
    from spillvault.adapters.storage.artifact_store import LocalArtifactStore

    def hwm_kib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        raise SystemExit("no VmHWM")

    block = os.urandom(1 << 20)
    session = open_session(sys.argv[1], event_store="memory")
    store = LocalArtifactStore(session)
    store.store((block for _ in range(2)), source_tool="warmup")
    before = hwm_kib()
    # Fresh 1 MiB objects: keeping any of them would show in the peak.
    fresh = (block[:-1] + bytes([i]) for i in range(64))
    artifact = store.store(fresh, source_tool="big")
    after = hwm_kib()
    assert artifact.content["size_bytes"] == 64 << 20
    print(after - before)
    """
)


def test_storing_64_mib_keeps_memory_bounded(session_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(session_dir)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    growth_kib = int(done.stdout.strip())
    assert growth_kib < 16 * 1024, f"peak RSS grew by {growth_kib} KiB"
