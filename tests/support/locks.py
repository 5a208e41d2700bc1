"""The session's in-process lock in tests: forget it, or see who waits for it."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from spillvault.adapters.storage.session_lock import _registry as lock_registry

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.adapters.storage.session_lock import SessionLock


def drop_locks(path: Path) -> None:
    """Make the next open of `path` get a fresh session lock (bound to its own seam).

    The session lock is shared per directory by every object opened on it and
    keeps the seam of the first opener. A closed faulted session may still be
    referenced (an exception's traceback in a captured log record), so its
    lock, bound to the faulted `CrashFS`, is forgotten once it is not held
    (without a garbage collection, which costs more than a whole operation).
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return  # a creation failed before the directory existed
    key = (info.st_dev, info.st_ino)
    lock = lock_registry.get(key)
    if lock is None:
        return
    if lock._depth:
        msg = f"the session lock of {path} is still held"
        raise AssertionError(msg)
    del lock_registry[key]


class BlockingWitness:
    """The session lock's mutex, telling when another thread has to wait for it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.blocked = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Acquire the mutex; set `blocked` first when it is held by another thread."""
        if self.inner.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.blocked.set()
        return bool(self.inner.acquire(True, timeout))

    def release(self) -> None:
        """Release the mutex."""
        self.inner.release()


@contextmanager
def witnessing(lock: SessionLock) -> Iterator[BlockingWitness]:
    """Put a `BlockingWitness` on `lock`'s mutex for the `with` block."""
    witness = BlockingWitness(lock._mutex)
    lock._mutex = witness  # type: ignore[assignment]
    try:
        yield witness
    finally:
        lock._mutex = witness.inner
