"""Fake adapters for unit tests (cosmicpython style)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from spillvault.adapters.storage.fs import OsFileSystem

from support.dates import fixed


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or fixed(2026)

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> datetime:
        self.current += timedelta(seconds=seconds)
        return self.current


class RecordingFileSystem(OsFileSystem):
    """The real seam, recording each call's name and first argument."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._mutex = threading.Lock()
        for name in (
            "open", "close", "read", "pread", "write", "fsync", "ftruncate", "fstat",
            "fchmod", "lstat", "mkdir", "link", "rename", "unlink", "rmdir",
            "listdir", "flock",
        ):  # fmt: skip
            setattr(self, name, self._recorder(name, getattr(OsFileSystem, name)))

    def _recorder(self, name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._mutex:
                self.calls.append((name, args[0] if args else None))
            return real(*args, **kwargs)

        return call

    def names(self, operation: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == operation]
