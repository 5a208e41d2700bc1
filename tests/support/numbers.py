"""Hostile values for numeric settings: what a config file or a caller may hand in."""

from __future__ import annotations

import math

from hypothesis import strategies as st

HUGE = 10**100
BEYOND_STR = 10**5000
"""Too long for str(): Python refuses to print more than 4300 digits."""

hostile_numbers = st.one_of(
    st.sampled_from(
        [math.nan, math.inf, -math.inf, HUGE, -HUGE, BEYOND_STR, 2**63, 2**63 - 1]
    ),
    st.sampled_from([True, False, None, "1", "nan", b"1", 1j, [1]]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
)


def is_real(value: object) -> bool:
    """Tell an int or float from a bool and everything else."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    """Tell an int from a bool and everything else."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value: object) -> bool:
    """Tell a real number that a float holds without overflowing to infinity."""
    if not is_real(value):
        return False
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except OverflowError:
        return False
