"""Recovery pass (S2.6) paths the main suite does not reach: races and I/O errors.

The pass runs on a real session through `HookFS`, the real seam with a hook
called before each call, which plays another process (or a failing disk) at
one exact moment of the pass.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.services.recovery import recover_artifacts
from spillvault.adapters.session import Session, open_session
from spillvault.adapters.storage.artifact_store import TMP_PREFIX, LocalArtifactStore
from spillvault.adapters.storage.fs import OsFileSystem
from spillvault.adapters.storage.layout import MARKER_NAME
from spillvault.domain.constants import RETENTION_JOURNAL_NAME

from support.fakes import FakeClock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

OPS = (
    "open", "close", "read", "pread", "write", "fsync", "ftruncate", "fstat",
    "fchmod", "lstat", "mkdir", "link", "rename", "unlink", "rmdir", "listdir",
    "flock",
)  # fmt: skip


@dataclass
class HookFS(OsFileSystem):
    """The real seam; `before(op, args)` runs before each call (may act or raise)."""

    before: Callable[[str, tuple[Any, ...]], None] | None = None

    def __post_init__(self) -> None:
        for op in OPS:
            setattr(self, op, self._wrap(op, getattr(OsFileSystem, op)))

    def _wrap(self, op: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.before is not None:
                self.before(op, args)
            return real(*args, **kwargs)

        return call


def eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


@pytest.fixture
def fs() -> HookFS:
    return HookFS()


@pytest.fixture
def session(session_dir: Path, fs: HookFS) -> Iterator[Session]:
    with open_session(session_dir, fs=fs, event_store="memory", clock=FakeClock()) as s:
        yield s


@pytest.fixture
def store(session: Session) -> Iterator[LocalArtifactStore]:
    with LocalArtifactStore(session) as opened:
        yield opened


def state_of(session: Session, name: str) -> str | None:
    artifact = session.store.get_artifact(name)
    return None if artifact is None else artifact.state


def abandoned(store: LocalArtifactStore, data: bytes) -> str:
    """An artifact left open by a dead writer: its fd (and flock) dropped."""
    stream = store.open_stream("t")
    stream.write(data)
    os.close(stream._fd)
    stream._fd = None
    return stream.filename


def fds_on(path: Path) -> list[int]:
    """This process's descriptors open on `path`."""
    found = []
    for entry in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(f"/proc/self/fd/{entry}") == str(path):
                found.append(int(entry))
    return found


def private_file(path: Path, data: bytes = b"stale") -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)
    return path


# --------------------------------------------------------- session tmp files


@pytest.mark.parametrize("owner", [MARKER_NAME, RETENTION_JOURNAL_NAME])
def test_a_directory_named_like_a_writer_tmp_file_is_left_alone(
    session_dir: Path, owner: str
) -> None:
    with open_session(session_dir):
        pass
    odd = session_dir / f".{owner}.tmp-0123456789abcdef"
    odd.mkdir(mode=0o700)
    (odd / "inside").write_bytes(b"the operator's\n")
    stale = private_file(session_dir / f".{owner}.tmp-fedcba9876543210")
    with open_session(session_dir) as session:
        assert session.recovery is not None
        assert session.recovery.removed_tmp == [stale.name]
    assert not stale.exists()
    assert (odd / "inside").read_bytes() == b"the operator's\n"


# ------------------------------------------------------ tool-results tmp files


def test_a_tmp_file_gone_before_the_pass_opens_it_is_skipped(
    session: Session, session_dir: Path, fs: HookFS
) -> None:
    tmp = private_file(session_dir / "tool-results" / f"{TMP_PREFIX}finished")

    def before(op: str, args: tuple[Any, ...]) -> None:
        if op == "open" and args[0] == tmp.name:
            tmp.unlink()  # its writer renamed it into place meanwhile

    fs.before = before
    report = recover_artifacts(session)
    fs.before = None
    assert report.removed_tmp == report.live_tmp == report.refused == []
    assert not report.changed


@pytest.mark.parametrize("op", ["open", "fstat"])
def test_an_io_error_opening_an_entry_stops_the_pass(
    session: Session, session_dir: Path, fs: HookFS, op: str
) -> None:
    tmp = private_file(session_dir / "tool-results" / f"{TMP_PREFIX}stale")
    armed: list[bool] = []

    def before(called: str, args: tuple[Any, ...]) -> None:
        if called == "open" and args[0] == tmp.name:
            armed.append(True)
        if called == op and armed:
            raise eio()

    fs.before = before
    with pytest.raises(OSError, match="Input/output error"):
        recover_artifacts(session)
    fs.before = None
    assert fds_on(tmp) == []  # closed on the way out
    assert tmp.exists()  # not removed on an error
    assert recover_artifacts(session).removed_tmp == [tmp.name]  # the next pass


# ----------------------------------------------------------- open artifacts


def test_an_open_artifact_settled_while_hashed_is_not_sealed_again(
    session: Session, store: LocalArtifactStore, fs: HookFS
) -> None:
    name = abandoned(store, b"half of it\n" * 10)

    def before(op: str, args: tuple[Any, ...]) -> None:
        if op in {"read", "pread"} and fs.before is not None:
            fs.before = None
            # Another process records the artifact's fate meanwhile.
            artifact = session.store.get_artifact(name)
            assert artifact is not None
            artifact.mark_lost(detected_at=session.clock.now())
            session.store.save_aggregates(artifact)

    fs.before = before
    report = recover_artifacts(session)
    assert fs.before is None  # the hook ran
    assert report.sealed_partial == []
    assert state_of(session, name) == "lost"


# ------------------------------------------------------ vanished artifacts


def test_a_vanished_artifact_put_back_before_it_is_recorded_is_not_lost(
    session: Session, store: LocalArtifactStore, session_dir: Path, fs: HookFS
) -> None:
    name = store.store([b"sealed bytes\n"], source_tool="t").filename
    path = session_dir / "tool-results" / name
    aside = session_dir / "aside"
    path.rename(aside)
    lstats: list[str] = []

    def before(op: str, args: tuple[Any, ...]) -> None:
        if op == "lstat" and args[0] == name:
            lstats.append(name)
            if len(lstats) == 2:  # seen gone; back before the loss is recorded
                aside.rename(path)

    fs.before = before
    report = recover_artifacts(session)
    fs.before = None
    assert len(lstats) == 2
    assert report.marked_lost == []
    assert state_of(session, name) == "sealed"
    assert path.read_bytes() == b"sealed bytes\n"


def test_a_vanished_artifact_deleted_meanwhile_is_not_marked_lost(
    session: Session, store: LocalArtifactStore, session_dir: Path, fs: HookFS
) -> None:
    name = store.store([b"sealed bytes\n"], source_tool="t").filename
    (session_dir / "tool-results" / name).unlink()

    def before(op: str, args: tuple[Any, ...]) -> None:
        if op == "lstat" and args[0] == name and fs.before is not None:
            fs.before = None
            # A collector in another process records its deletion meanwhile.
            artifact = session.store.get_artifact(name)
            assert artifact is not None
            artifact.quarantine("intent", quarantined_at=session.clock.now())
            artifact.delete(deleted_at=session.clock.now())
            session.store.save_aggregates(artifact)

    fs.before = before
    report = recover_artifacts(session)
    assert fs.before is None
    assert report.marked_lost == []
    assert state_of(session, name) == "deleted"
