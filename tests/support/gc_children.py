"""Filesystem seams and child-process entry points for the GC tests (test_gc.py).

A crash sweep runs hundreds of short-lived children. `crash_server` is spawned
once (a fresh interpreter that imports the library once) and forks one child
per request, so each crash costs a fork, not an interpreter start-up.
"""

from __future__ import annotations

import errno
import os
import threading
import traceback
from typing import Any

from spillvault.adapters.services.gc import apply_cleanup_from_journal
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.fs import OsFileSystem
from spillvault.domain.cleanup import ArtifactCleanupPlan
from spillvault.domain.timestamps import parse_timestamp

CRASH_EXIT_CODE = 17
OPERATIONS = (
    "open", "close", "read", "pread", "write", "fsync", "ftruncate", "fstat",
    "fchmod", "lstat", "mkdir", "link", "rename", "unlink", "rmdir", "listdir",
    "flock",
)  # fmt: skip


class CrashingFileSystem(OsFileSystem):
    """The real seam; once armed with N, the process dies at its N-th operation.

    The N-th operation is not performed: the process ends with `os._exit`, as a
    power cut would end it, with no cleanup, no `finally`, no flush.
    """

    def __init__(self, note: str | None = None) -> None:
        self.remaining: int | None = None
        self.note = note
        for name in OPERATIONS:
            setattr(self, name, self._wrap(name, getattr(OsFileSystem, name)))

    def arm(self, crash_at: int) -> None:
        self.remaining = crash_at

    def _wrap(self, name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.remaining is not None:
                self.remaining -= 1
                if self.remaining == 0:
                    self._die(name, args)
            return real(*args, **kwargs)

        return call

    def _die(self, name: str, args: tuple[Any, ...]) -> None:
        """Leave a note naming the operation not performed, then die."""
        if self.note is not None:
            shown = args[0] if args and isinstance(args[0], str) else ""
            fd = os.open(self.note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, f"{name}({shown})".encode())
            os.close(fd)
        os._exit(CRASH_EXIT_CODE)


def apply_then_crash(
    session_dir: str, plan: dict[str, Any], now: str, crash_at: int, note: str
) -> None:
    """Open the session, then apply `plan`, dying at filesystem operation `crash_at`.

    Returns when the apply finished before operation `crash_at` came; otherwise
    the process dies with `CRASH_EXIT_CODE` and `note` names the operation
    that never happened.
    """
    fs = CrashingFileSystem(note)
    session = open_session(session_dir, fs=fs)
    fs.arm(crash_at)
    apply_cleanup_from_journal(
        session,
        ArtifactCleanupPlan.from_dict(plan),
        now=parse_timestamp(now, "now"),
    )
    fs.remaining = None
    session.close()


def crash_server(conn: Any) -> None:
    """Serve `apply_then_crash` requests from `conn`, one forked child each.

    Each request is the argument tuple of `apply_then_crash`; the answer is the
    child's exit code. `None` ends the server.
    """
    while (request := conn.recv()) is not None:
        pid = os.fork()
        if pid == 0:  # the child: no threads, no session open in this process
            code = 0
            try:
                apply_then_crash(*request)
            except BaseException:  # reported through the exit code
                traceback.print_exc()
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        conn.send(os.waitstatus_to_exitcode(status))


def _in_quarantine(dir_fd: int | None) -> bool:
    if dir_fd is None:
        return False
    return "/.quarantine/" in os.readlink(f"/proc/self/fd/{dir_fd}")


class BlockingUnlinkFileSystem(OsFileSystem):
    """The real seam; unlinking `name` inside `.quarantine/` waits for `release`.

    `entered` is set once the unlink is reached, so a test knows the thread
    doing it is inside GC apply's critical section (it holds the session lock).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.entered = threading.Event()
        self.release = threading.Event()

    def unlink(self, path: str, *, dir_fd: int | None = None) -> None:  # type: ignore[override]
        if path == self.name and _in_quarantine(dir_fd):
            self.entered.set()
            if not self.release.wait(timeout=60):
                msg = "the test never released the blocked unlink"
                raise TimeoutError(msg)
        os.unlink(path, dir_fd=dir_fd)


class BlockingReadFileSystem(OsFileSystem):
    """The real seam; a `pread` in the thread named `thread_name` waits once.

    Lets a test stop a lease's `prepare` while it re-verifies the artifact,
    that is while it holds the session lock.
    """

    def __init__(self, thread_name: str) -> None:
        self.thread_name = thread_name
        self.entered = threading.Event()
        self.release = threading.Event()

    def pread(self, fd: int, length: int, offset: int) -> bytes:  # type: ignore[override]
        if threading.current_thread().name == self.thread_name and not (
            self.entered.is_set()
        ):
            self.entered.set()
            if not self.release.wait(timeout=60):
                msg = "the test never released the blocked read"
                raise TimeoutError(msg)
        return os.pread(fd, length, offset)


class SwapForFifoFileSystem(OsFileSystem):
    """The real seam; GC's move of `name` into quarantine first finds a FIFO there.

    Just before the rename of `name`, the regular file is replaced by a FIFO,
    as another process could do between apply's `lstat` check and its move.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.swapped = False

    def rename(  # type: ignore[override]
        self,
        src: str,
        dst: str,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        if src == self.name and not self.swapped and _in_quarantine(dst_dir_fd):
            self.swapped = True
            os.unlink(src, dir_fd=src_dir_fd)
            os.mkfifo(src, 0o600, dir_fd=src_dir_fd)
        os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)


class FailingRenameFileSystem(OsFileSystem):
    """The real seam; while `failing`, every rename fails with EIO (a bad disk)."""

    def __init__(self) -> None:
        self.failing = False

    def rename(  # type: ignore[override]
        self,
        src: str,
        dst: str,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        if self.failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
