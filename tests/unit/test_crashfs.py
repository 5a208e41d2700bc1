"""The crash-simulating seam itself (issue 6, item 1), and a smoke run on a session."""

from __future__ import annotations

import errno
import gc
import hashlib
import os
from contextlib import suppress
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.fs import OsFileSystem, write_all

from support.crashfs import CHOICES, CrashFS, SimulatedCrash, tree_of

if TYPE_CHECKING:
    from pathlib import Path

CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
ERRNOS = [errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir(mode=0o700)
    return path


def open_dir(fs: CrashFS, root: Path) -> int:
    return fs.open(str(root), DIR)


def make_file(fs: CrashFS, dir_fd: int, name: str, data: bytes, *, sync: bool) -> None:
    fd = fs.open(name, CREATE, 0o600, dir_fd=dir_fd)
    write_all(fs, fd, data)
    if sync:
        fs.fsync(fd)
    fs.close(fd)


# counting -------------------------------------------------------------------


def test_counts_only_mutating_and_syncing_calls(root: Path) -> None:
    fs = CrashFS(root, seed=1)
    d = open_dir(fs, root)  # not a step: no O_CREAT
    fd = fs.open("a", CREATE, 0o600, dir_fd=d)  # 1
    fs.fchmod(fd, 0o600)  # 2
    fs.write(fd, b"hello")  # 3
    fs.fstat(fd)
    fs.pread(fd, 5, 0)
    fs.fsync(fd)  # 4
    fs.ftruncate(fd, 2)  # 5
    fs.close(fd)
    fs.lstat("a", dir_fd=d)
    fs.listdir(d)
    fs.mkdir("sub", dir_fd=d)  # 6
    fs.link("a", "b", src_dir_fd=d, dst_dir_fd=d)  # 7
    fs.rename("b", "sub/b", src_dir_fd=d, dst_dir_fd=d)  # 8
    fs.unlink("sub/b", dir_fd=d)  # 9
    fs.rmdir("sub", dir_fd=d)  # 10
    fs.fsync(d)  # 11
    with pytest.raises(FileExistsError):
        fs.open("a", CREATE, 0o600, dir_fd=d)  # 12, fails for real but counts
    fs.close(d)
    assert fs.count == 12
    assert [step.op for step in fs.steps] == [
        "open",
        "fchmod",
        "write",
        "fsync",
        "ftruncate",
        "mkdir",
        "link",
        "rename",
        "unlink",
        "rmdir",
        "fsync",
        "open",
    ]
    assert fs.steps[0].outcome == "created"
    assert fs.steps[-1].outcome == "EEXIST"
    assert "#3 write a [0, +5) -> ok" in fs.report()
    assert "seed=1" in fs.report()


# faults ---------------------------------------------------------------------


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
def test_transient_errno_fails_the_nth_step_once(root: Path, err: int) -> None:
    fs = CrashFS(root, seed=2)
    fs.inject(2, err)
    d = open_dir(fs, root)
    fd = fs.open("f", CREATE, 0o600, dir_fd=d)  # step 1
    with pytest.raises(OSError) as caught:
        fs.write(fd, b"lost")  # step 2
    assert caught.value.errno == err
    assert (root / "f").read_bytes() == b""  # nothing happened
    assert fs.write(fd, b"kept") == 4  # step 3: the fault was transient
    fs.fsync(fd)
    fs.close(fd)
    fs.close(d)
    assert (root / "f").read_bytes() == b"kept"
    assert fs.steps[1].outcome == f"injected {errno.errorcode[err]}"


@pytest.mark.parametrize("err", ERRNOS, ids=errno.errorcode.get)
def test_persistent_errno_fails_every_step_from_the_nth(root: Path, err: int) -> None:
    fs = CrashFS(root, seed=3)
    fs.inject(3, err, persistent=True)
    d = open_dir(fs, root)
    fd = fs.open("f", CREATE, 0o600, dir_fd=d)  # 1
    fs.write(fd, b"one")  # 2
    for call in (
        lambda: fs.write(fd, b"two"),
        lambda: fs.fsync(fd),
        lambda: fs.fsync(d),
        lambda: fs.mkdir("x", dir_fd=d),
        lambda: fs.unlink("f", dir_fd=d),
    ):
        with pytest.raises(OSError) as caught:
            call()
        assert caught.value.errno == err
    assert (root / "f").read_bytes() == b"one"
    assert (root / "f").exists()
    assert not (root / "x").exists()
    fs.close(fd)
    fs.close(d)


def test_a_fault_can_target_one_kind_of_step(root: Path) -> None:
    fs = CrashFS(root, seed=4)
    fs.inject(1, errno.EIO, ops={"fsync"})
    d = open_dir(fs, root)
    fd = fs.open("f", CREATE, 0o600, dir_fd=d)
    fs.write(fd, b"data")
    with pytest.raises(OSError, match="Input/output"):
        fs.fsync(fd)
    fs.fsync(fd)
    fs.close(fd)
    fs.close(d)


def test_short_write_writes_part_and_write_all_finishes(root: Path) -> None:
    fs = CrashFS(root, seed=5)
    fs.inject(2, "short")
    d = open_dir(fs, root)
    fd = fs.open("f", CREATE, 0o600, dir_fd=d)
    assert fs.write(fd, b"0123456789") == 5
    assert fs.write(fd, b"abcdef") == 6  # transient
    fs.close(fd)
    assert (root / "f").read_bytes() == b"01234abcdef"
    persistent = CrashFS(root, seed=5)
    persistent.inject(1, "short", persistent=True)
    fd = persistent.open("g", CREATE, 0o600, dir_fd=d)
    write_all(persistent, fd, b"0123456789")
    persistent.close(fd)
    fs.close(d)
    assert (root / "g").read_bytes() == b"0123456789"
    assert [s.outcome for s in persistent.steps if s.op == "write"] == [
        "short 5",
        "short 2",
        "short 1",
        "short 1",
        "ok",
    ]


# crash and rebuild ----------------------------------------------------------


def synced_then_pending(fs: CrashFS, root: Path) -> None:
    """`f`: 8 KiB synced, then 10,000 unsynced bytes appended (entry durable)."""
    d = open_dir(fs, root)
    fd = fs.open("f", CREATE, 0o600, dir_fd=d)
    write_all(fs, fd, b"S" * 8192)
    fs.fsync(fd)
    fs.fsync(d)
    write_all(fs, fd, b"P" * 10_000)


@pytest.mark.parametrize("choice", CHOICES)
def test_unsynced_write_gets_its_choice_and_synced_bytes_survive(
    root: Path, choice: str
) -> None:
    fs = CrashFS(root, seed=6)
    synced_then_pending(fs, root)
    report = fs.rebuild(choice)
    data = (root / "f").read_bytes()
    assert data[:8192] == b"S" * 8192
    tail = data[8192:]
    if choice == "written":
        assert tail == b"P" * 10_000
    elif choice == "dropped":
        assert tail == b""
    elif choice == "torn":
        # cut at a 4 KiB file offset strictly inside the write
        assert len(data) in {12288, 16384}
        assert tail == b"P" * len(tail)
    elif choice == "zero":
        assert tail == bytes(10_000)
    else:
        assert len(tail) == 10_000
        assert tail != b"P" * 10_000
        assert tail != bytes(10_000)
    assert report.choices == [choice]
    assert str(report.decisions[0][0]) == "#5 write f [8192, +10000)"


def test_fsynced_file_survives_exactly(root: Path) -> None:
    fs = CrashFS(root, seed=7)
    d = open_dir(fs, root)
    make_file(fs, d, "f", b"x" * 10_000, sync=True)
    fs.fsync(d)
    assert fs.pending_ops() == []
    for choice in CHOICES:
        CrashFS(root, seed=7).rebuild(choice)
        assert (root / "f").read_bytes() == b"x" * 10_000
    fs.rebuild()
    assert (root / "f").read_bytes() == b"x" * 10_000


def test_a_torn_write_spanning_no_4k_boundary_lands_nothing(root: Path) -> None:
    fs = CrashFS(root, seed=8)
    d = open_dir(fs, root)
    make_file(fs, d, "f", b"abc", sync=True)
    fs.fsync(d)
    fd = fs.open("f", os.O_WRONLY | os.O_APPEND, dir_fd=d)
    fs.write(fd, b"def")
    fs.rebuild("torn")
    assert (root / "f").read_bytes() == b"abc"


def test_unsynced_truncate_can_be_lost(root: Path) -> None:
    fs = CrashFS(root, seed=9)
    d = open_dir(fs, root)
    make_file(fs, d, "f", b"0123456789", sync=True)
    fs.fsync(d)
    fd = fs.open("f", os.O_RDWR, dir_fd=d)
    fs.ftruncate(fd, 4)
    assert fs.rebuild("written").choices == ["written"]
    assert (root / "f").read_bytes() == b"0123"
    again = CrashFS(root, seed=9)
    d = open_dir(again, root)
    make_file(again, d, "g", b"0123456789", sync=True)
    again.fsync(d)
    fd = again.open("g", os.O_RDWR, dir_fd=d)
    again.ftruncate(fd, 4)
    again.rebuild("dropped")
    assert (root / "g").read_bytes() == b"0123456789"


def test_sequential_keeps_a_prefix_of_each_files_writes(root: Path) -> None:
    fs = CrashFS(root, seed=10, sequential=True)
    d = open_dir(fs, root)
    make_file(fs, d, "f", b"", sync=True)
    fs.fsync(d)
    fd = fs.open("f", os.O_WRONLY | os.O_APPEND, dir_fd=d)
    for part in (b"a", b"b", b"c"):
        fs.write(fd, part)
    report = fs.rebuild(["written", "dropped", "written"])
    assert report.choices == ["written", "dropped", "dropped"]
    assert (root / "f").read_bytes() == b"a"


def test_a_created_file_needs_a_directory_fsync(root: Path) -> None:
    fs = CrashFS(root, seed=11)
    d = open_dir(fs, root)
    make_file(fs, d, "lost", b"data", sync=True)
    report = fs.rebuild("written")
    assert not (root / "lost").exists()
    assert report.reverted == ["lost"]

    fs = CrashFS(root, seed=11)
    d = open_dir(fs, root)
    make_file(fs, d, "kept", b"data", sync=True)
    fs.fsync(d)
    fs.rebuild("written")
    assert (root / "kept").read_bytes() == b"data"


def test_a_created_directory_needs_its_parent_fsynced(root: Path) -> None:
    fs = CrashFS(root, seed=12)
    d = open_dir(fs, root)
    fs.mkdir("sub", 0o700, dir_fd=d)
    sub = fs.open("sub", DIR, dir_fd=d)
    make_file(fs, sub, "f", b"data", sync=True)
    fs.fsync(sub)
    fs.rebuild()
    assert not (root / "sub").exists()


def test_kept_directory_entries_survive_with_their_synced_bytes(root: Path) -> None:
    fs = CrashFS(root, seed=13)
    d = open_dir(fs, root)
    make_file(fs, d, "f", b"data", sync=False)
    fs.rebuild("dropped", dir_entries="kept")
    assert (root / "f").read_bytes() == b""


def test_an_unsynced_rename_is_undone(root: Path) -> None:
    fs = CrashFS(root, seed=14)
    d = open_dir(fs, root)
    make_file(fs, d, "old", b"old", sync=True)
    make_file(fs, d, "tmp", b"new", sync=True)
    fs.fsync(d)
    fs.rename("tmp", "old", src_dir_fd=d, dst_dir_fd=d)
    assert (root / "old").read_bytes() == b"new"
    report = fs.rebuild()
    assert tree_of(root) == {"old": b"old", "tmp": b"new"}
    assert sorted(report.reverted) == ["old", "tmp"]


def test_a_synced_rename_is_kept(root: Path) -> None:
    fs = CrashFS(root, seed=15)
    d = open_dir(fs, root)
    make_file(fs, d, "old", b"old", sync=True)
    make_file(fs, d, "tmp", b"new", sync=True)
    fs.fsync(d)
    fs.rename("tmp", "old", src_dir_fd=d, dst_dir_fd=d)
    fs.fsync(d)
    fs.rebuild()
    assert tree_of(root) == {"old": b"new"}


def test_a_cross_directory_rename_moves_as_a_unit(root: Path) -> None:
    for synced, expected in (
        (None, {"a": "dir", "b": "dir", "a/f": b"f"}),
        ("a", {"a": "dir", "b": "dir", "b/f": b"f"}),
        ("b", {"a": "dir", "b": "dir", "b/f": b"f"}),
    ):
        fs = CrashFS(root, seed=16)
        d = open_dir(fs, root)
        for name in ("a", "b"):
            with suppress(FileExistsError):
                fs.mkdir(name, 0o700, dir_fd=d)
        fs.fsync(d)
        a = fs.open("a", DIR, dir_fd=d)
        b = fs.open("b", DIR, dir_fd=d)
        for leftover in ("a/f", "b/f"):
            with suppress(FileNotFoundError):
                fs.unlink(leftover, dir_fd=d)
        fs.fsync(a)
        fs.fsync(b)
        make_file(fs, a, "f", b"f", sync=True)
        fs.fsync(a)
        fs.rename("f", "f", src_dir_fd=a, dst_dir_fd=b)
        if synced is not None:
            fs.fsync(a if synced == "a" else b)
        fs.rebuild()
        assert tree_of(root) == expected, synced


def test_an_unsynced_unlink_brings_back_the_synced_file(root: Path) -> None:
    fs = CrashFS(root, seed=17)
    d = open_dir(fs, root)
    make_file(fs, d, "f", b"durable", sync=True)
    fs.fsync(d)
    fd = fs.open("f", os.O_WRONLY | os.O_APPEND, dir_fd=d)
    fs.write(fd, b"+pending")
    fs.close(fd)
    fs.unlink("f", dir_fd=d)
    fs.rebuild("dropped")
    assert (root / "f").read_bytes() == b"durable"


def test_hard_links_are_rebuilt_as_one_inode(root: Path) -> None:
    fs = CrashFS(root, seed=18)
    d = open_dir(fs, root)
    make_file(fs, d, "tmp", b"data", sync=True)
    fs.link("tmp", "final", src_dir_fd=d, dst_dir_fd=d)
    fs.fsync(d)
    fs.unlink("tmp", dir_fd=d)  # not synced: comes back
    fs.rebuild()
    assert (root / "tmp").stat().st_ino == (root / "final").stat().st_ino
    assert (root / "final").stat().st_nlink == 2


def test_untracked_and_excluded_files_are_taken_as_they_are(root: Path) -> None:
    (root / "before").write_bytes(b"old")
    fs = CrashFS(root, seed=19)
    d = open_dir(fs, root)
    make_file(fs, d, "events.sqlite3", b"", sync=False)  # never dir-fsynced
    (root / "events.sqlite3").write_bytes(b"committed")  # as SQLite would
    (root / "events.sqlite3-wal").write_bytes(b"wal")
    make_file(fs, d, "new", b"n", sync=True)
    ino = os.stat(root / "events.sqlite3").st_ino
    fs.rebuild()
    assert tree_of(root, exclude=()) == {
        "before": b"old",
        "events.sqlite3": b"committed",
        "events.sqlite3-wal": b"wal",
    }
    assert os.stat(root / "events.sqlite3").st_ino == ino


def test_modes_and_mtimes_survive(root: Path) -> None:
    fs = CrashFS(root, seed=20)
    d = open_dir(fs, root)
    fs.mkdir("sub", 0o700, dir_fd=d)
    make_file(fs, d, "f", b"x", sync=True)
    fs.fsync(d)
    os.utime(root / "f", ns=(10**18, 10**18))
    fs.rebuild()
    assert (root / "f").stat().st_mode & 0o777 == 0o600
    assert (root / "f").stat().st_mtime_ns == 10**18
    assert (root / "sub").stat().st_mode & 0o777 == 0o700


def test_crash_at_the_nth_step_kills_the_process(root: Path) -> None:
    fs = CrashFS(root, seed=21, crash_at=3)
    d = open_dir(fs, root)
    fd = fs.open("f", CREATE, 0o600, dir_fd=d)  # 1
    fs.write(fd, b"a")  # 2
    with pytest.raises(SimulatedCrash) as caught:
        fs.fsync(fd)  # 3: not done
    assert caught.value.seed == 21
    assert caught.value.step == 3  # the first step not performed
    assert "seed=21, crash_at=3" in str(caught.value)
    assert not isinstance(caught.value, Exception)
    with pytest.raises(SimulatedCrash):
        fs.read(fd, 1)  # the process is dead to the layer
    with pytest.raises(SimulatedCrash):
        fs.lstat("f", dir_fd=d)
    fs.close(fd)  # a no-op: the crash closed it
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
    assert fs.steps[-1].outcome == "crash"
    assert fs.pending_ops()[0].data == b"a"
    fs.rebuild()
    assert not (root / "f").exists()


def test_same_seed_gives_the_same_tree(tmp_path: Path) -> None:
    def run(seed: int) -> tuple[dict[str, bytes | str], str]:
        root = tmp_path / f"r{seed}-{len(list(tmp_path.iterdir()))}"
        root.mkdir(mode=0o700)
        fs = CrashFS(root, seed=seed)
        d = open_dir(fs, root)
        for index in range(6):
            make_file(fs, d, f"f{index}", bytes([65 + index]) * 9000, sync=False)
            if index % 2:
                fs.fsync(d)
        fd = fs.open("f1", os.O_WRONLY | os.O_APPEND, dir_fd=d)
        fs.write(fd, b"z" * 5000)
        fs.rename("f3", "f0", src_dir_fd=d, dst_dir_fd=d)
        report = fs.rebuild(dir_entries="random")
        return tree_of(root), str(report)

    first = run(1234)
    assert run(1234) == first
    assert any(run(seed)[0] != first[0] for seed in range(5))


def test_report_choices_replay_a_rebuild(tmp_path: Path) -> None:
    trees = []
    report = None
    for attempt in range(2):
        root = tmp_path / f"r{attempt}"
        root.mkdir(mode=0o700)
        fs = CrashFS(root, seed=99 + attempt)
        synced_then_pending(fs, root)
        report = fs.rebuild(None if report is None else report.choices)
        trees.append((root / "f").read_bytes()[:12288])
    assert trees[0] == trees[1]


def test_a_wrong_number_of_choices_is_refused(root: Path) -> None:
    fs = CrashFS(root, seed=22)
    synced_then_pending(fs, root)
    with pytest.raises(ValueError, match="2 choices for 1 pending ops"):
        fs.rebuild(["written", "dropped"])
    with pytest.raises(ValueError, match="unknown choice"):
        fs.rebuild(["sideways"])


# smoke: a session crashed in the middle of storing an artifact ----------------

OUTPUT = "x\n" * 5000
DIGEST = hashlib.sha256(OUTPUT.encode()).hexdigest()


def store_until_crash(path: Path, fs: CrashFS) -> bool:
    """Store OUTPUT through `fs`; return whether the crash interrupted it."""
    session = open_session(path, fs=fs)
    try:
        session.externalizer.externalize(OUTPUT, "bash")
    except SimulatedCrash:
        with suppress(SimulatedCrash):
            session.close()
        return True
    session.close()
    return False


def steps_of_one_store(tmp_path: Path) -> range:
    path = tmp_path / "dry-run"
    fs = CrashFS(path, seed=0)
    session = open_session(path, fs=fs)
    opened = fs.count
    session.externalizer.externalize(OUTPUT, "bash")
    stored = fs.count
    session.close()
    return range(opened + 1, stored + 2)


def test_session_recovers_from_a_crash_at_every_step_of_a_store(
    tmp_path: Path,
) -> None:
    steps = steps_of_one_store(tmp_path)
    assert len(steps) >= 8
    outcomes = set()
    for crash_at in steps:
        for seed in (crash_at, crash_at + 1000):
            path = tmp_path / f"s-{crash_at}-{seed}"
            fs = CrashFS(path, seed=seed, crash_at=crash_at)
            crashed = store_until_crash(path, fs)
            assert crashed == (crash_at < steps.stop - 1), fs.report()
            gc.collect()  # drop the dead session's lock and store
            report = fs.rebuild()
            context = f"{fs.report()}\n{report}"
            with open_session(path, fs=OsFileSystem()) as session:
                names = sorted(os.listdir(path / "tool-results"))
                assert not [n for n in names if n.startswith(".tmp-")], context
                assert len(names) <= 1, context
                for name in names:
                    data = (path / "tool-results" / name).read_bytes()
                    assert hashlib.sha256(data).hexdigest() == DIGEST, context
                    assert (path / "tool-results" / name).stat().st_nlink == 1
                for artifact in session.externalizer.artifacts():
                    # a recorded artifact is present and intact
                    assert artifact.filename in names, context
                    content = artifact.stored_content
                    assert content is not None, context
                    assert content.content_sha256 == DIGEST, context
                outcomes.add(len(names))
    assert outcomes == {0, 1}
