"""Forget a session's in-process lock between simulated process lives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spillvault.adapters.storage.session_lock import _registry as lock_registry

if TYPE_CHECKING:
    from pathlib import Path


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
