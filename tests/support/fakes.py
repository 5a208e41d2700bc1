"""Fake adapters for unit tests (cosmicpython style)."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial

from support.dates import fixed
from support.intercept import InterceptingFS


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self.current = start or fixed(2026)

    def now(self) -> datetime:
        return self.current

    def advance(self, seconds: float) -> datetime:
        self.current += timedelta(seconds=seconds)
        return self.current


RecordingFileSystem = partial(InterceptingFS, record=True)
"""The real seam recording every call: kept for test_session.py; use InterceptingFS."""
