"""The session lock: one per session per process, shared, re-entrant, flocked.

flock conflicts between two descriptors of one process, so two private locks on
one session would deadlock; every object opened on a session therefore shares
the lock found here by the session directory's (st_dev, st_ino).
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from typing import TYPE_CHECKING, Self

from spillvault.adapters.storage.fs import PRIVATE_FILE_MODE, check_private

if TYPE_CHECKING:
    from types import TracebackType

    from spillvault.domain.ports import FileSystem

LOCK_NAME = ".lock"
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class SessionLock:
    """Re-entrant across one thread; exclusive across threads and processes.

    `on_disk=False` makes a lock of this process only, for a read-only view:
    it writes nothing, so reading a read-only copy never needs `.lock`.
    """

    def __init__(self, fs: FileSystem, dir_fd: int, *, on_disk: bool = True) -> None:
        self._fs = fs
        self._on_disk = on_disk
        # A private duplicate: the lock outlives the object that first opened it.
        self._dir_fd = os.dup(dir_fd)
        self._finalizer = weakref.finalize(self, os.close, self._dir_fd)
        self._mutex = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; the first acquire opens `.lock` and flocks it."""
        self._mutex.acquire()
        if self._depth == 0 and self._on_disk:
            try:
                self._lock_fd = self._open_and_lock()
            except BaseException:
                self._mutex.release()
                raise
        self._depth += 1

    def release(self) -> None:
        """Drop one level; the last release closes `.lock`, dropping the flock."""
        if self._depth == 0:
            msg = "session lock released more often than acquired"
            raise RuntimeError(msg)
        self._depth -= 1
        if self._depth == 0 and self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            self._fs.close(fd)
        self._mutex.release()

    @property
    def held(self) -> bool:
        """Say whether the calling thread holds the lock."""
        if not self._mutex.acquire(blocking=False):
            return False
        try:
            return self._depth > 0
        finally:
            self._mutex.release()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _open_and_lock(self) -> int:
        fd = self._fs.open(
            LOCK_NAME, _LOCK_FLAGS, PRIVATE_FILE_MODE, dir_fd=self._dir_fd
        )
        try:
            self._fs.fchmod(fd, PRIVATE_FILE_MODE)
            check_private(self._fs, fd, LOCK_NAME, directory=False)
            self._fs.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            self._fs.close(fd)
            raise
        return fd


_registry: weakref.WeakValueDictionary[tuple[int, int], SessionLock] = (
    weakref.WeakValueDictionary()
)
_registry_mutex = threading.Lock()


def session_lock_for(fs: FileSystem, dir_fd: int) -> SessionLock:
    """Return this process's lock for the session whose directory `dir_fd` is."""
    info = fs.fstat(dir_fd)
    key = (info.st_dev, info.st_ino)
    with _registry_mutex:
        lock = _registry.get(key)
        if lock is None:
            lock = SessionLock(fs, dir_fd)
            _registry[key] = lock
        return lock
