"""The tests' fixed dates, and the date-shift check (issue 13).

Every fixed date a test uses comes from `fixed()`. With
`SPILLVAULT_TEST_YEARS_AHEAD=N` each one moves N years back. Against the
kernel's file times and the real clock, which stay put, that is the world a
test sees when it runs N years after the dates written in it: `make test`
re-runs the tests marked `dated` with N = 1 and N = 10 (`make test-dates`).
libfaketime cannot stand in for this: it shifts the process's clock but not
the mtimes the kernel stamps, and those are what GC ages orphans by (S6.1).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime


def _years_ahead() -> int:
    raw = os.environ.get("SPILLVAULT_TEST_YEARS_AHEAD", "0")
    try:
        years = int(raw)
    except ValueError:
        msg = (
            f"SPILLVAULT_TEST_YEARS_AHEAD must be a whole number of years, not {raw!r}"
        )
        raise ValueError(msg) from None
    if not 0 <= years <= 100:
        msg = f"SPILLVAULT_TEST_YEARS_AHEAD must be within 0..100, not {years}"
        raise ValueError(msg)
    return years


YEARS_AHEAD = _years_ahead()


def fixed(year: int, month: int = 1, day: int = 1, hour: int = 0) -> datetime:
    """Return a fixed aware UTC test date, `YEARS_AHEAD` years earlier."""
    when = datetime(year, month, day, hour, tzinfo=UTC)
    # 29 February has no twin in most years: the 28th stands in.
    day = min(when.day, 28) if (when.month, when.day) == (2, 29) else when.day
    return when.replace(year=when.year - YEARS_AHEAD, day=day)


__all__ = ["YEARS_AHEAD", "fixed"]
