"""The in-process event store for unit tests: one per session dir per process (S4.4)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from eventsourcing.popo import POPOApplicationRecorder

from spillvault.adapters.storage.eventstore import SessionStore

if TYPE_CHECKING:
    from spillvault.domain.ports import FileSystem

_recorders: dict[tuple[int, int, str], POPOApplicationRecorder] = {}
_recorders_mutex = threading.Lock()


class MemoryBackend:
    """Shares one in-memory recorder among every object opened on a session."""

    kind = "memory"

    def __init__(self, fs: FileSystem, dir_fd: int, session_path: str) -> None:
        self._key = _key(fs, dir_fd, session_path)

    def describe(self) -> str:
        """Name the store for messages."""
        return "in-memory event store"

    def exists(self) -> bool:
        """Say whether this process holds a store for the session."""
        with _recorders_mutex:
            return self._key in _recorders

    def create(self) -> None:
        """Make an empty store for the session."""
        with _recorders_mutex:
            _recorders.setdefault(self._key, POPOApplicationRecorder())

    def open(self) -> SessionStore:
        """Open the session's store."""
        with _recorders_mutex:
            recorder = _recorders[self._key]
        return SessionStore(
            {"PERSISTENCE_MODULE": "eventsourcing.popo"}, recorder=recorder
        )


def forget_memory_store(fs: FileSystem, dir_fd: int, session_path: str) -> None:
    """Drop a session's in-memory store, as a process exit would (tests only)."""
    with _recorders_mutex:
        _recorders.pop(_key(fs, dir_fd, session_path), None)


def _key(fs: FileSystem, dir_fd: int, session_path: str) -> tuple[int, int, str]:
    # The path too: a test's deleted tmp dir may hand its inode to the next one.
    info = fs.fstat(dir_fd)
    return (info.st_dev, info.st_ino, session_path)
