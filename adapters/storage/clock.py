"""The production clock."""

from __future__ import annotations

from datetime import UTC, datetime


class SystemClock:
    """Aware UTC wall-clock time."""

    def now(self) -> datetime:
        """Return the current time."""
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()
