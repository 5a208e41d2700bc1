"""Test tiers: `make test` runs the fast tier, `make fuzz` the long one.

The tier is chosen by the test runner's environment (`SPILLVAULT_TEST_TIER`,
set by `make fuzz`); production code never reads it.
"""

from __future__ import annotations

import os
import random
from typing import TypeVar

T = TypeVar("T")

LONG = os.environ.get("SPILLVAULT_TEST_TIER", "fast") == "long"
HANG_GUARD_SECONDS = 120.0
"""The only wall-clock bound a test may have: it turns a hang into a failure,
and no run that works, however loaded the machine, comes near it."""


def pick(fast: int, long: int) -> int:
    """Return the size for the running tier."""
    return long if LONG else fast


def sample(cases: list[T], fast: int, *, seed: int = 0) -> list[T]:
    """Every case in the long tier; a fixed, seeded sample of `fast` in the fast one."""
    if LONG or len(cases) <= fast:
        return cases
    return random.Random(seed).sample(cases, fast)  # noqa: S311 - sampling tests
