"""Checks for numeric settings: the right type, finite, in range, safely shown.

Every policy and config field, and every numeric CLI flag, goes through these,
so a NaN, an infinity, a bool or a number too large to convert is refused with
the field's name instead of meaning something nobody asked for.
"""

from __future__ import annotations

import math
from typing import Final, TypeGuard

MAX_SIZE: Final = 2**63 - 1
"""The largest size, count or threshold a setting takes: a signed 64-bit
integer, which TOML, SQLite and most JSON readers stop at."""
_SHOWN_CHARS: Final = 80


def is_integer(value: object) -> TypeGuard[int]:
    """Tell an int from a bool (an int subclass) and everything else."""
    return isinstance(value, int) and not isinstance(value, bool)


def shown(value: object) -> str:
    """Return a short repr of `value` for a message; never raises."""
    if is_integer(value) and value.bit_length() > 64:
        # repr() refuses more than 4300 digits, and nobody reads 300.
        sign = "-" if value < 0 else ""
        return f"{sign}an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any object's repr may raise; a message must not
        return f"a {type(value).__name__}"
    if len(text) <= _SHOWN_CHARS:
        return text
    return text[: _SHOWN_CHARS - 3] + "..."


def integer_problem(name: str, value: object, low: int, high: int) -> str | None:
    """Name `name` unless `value` is an integer in [low, high]."""
    if is_integer(value) and low <= value <= high:
        return None
    kind = {0: "an integer >= 0", 1: "a positive integer"}.get(
        low, f"an integer >= {low}"
    )
    return f"{name} must be {kind} (at most {high}), not {shown(value)}"


def number_problem(
    name: str, value: object, low: float, high: float, *, above_low: bool = False
) -> str | None:
    """Name `name` unless `value` is a finite number in [low, high] (or (low, high])."""
    if is_integer(value) or isinstance(value, float):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            number = math.inf
        if (
            math.isfinite(number)
            and (number > low or not above_low)
            and low <= number <= high
        ):
            return None
    relation = ">" if above_low else ">="
    return (
        f"{name} must be a finite number {relation} {_plain(low)} "
        f"(at most {_plain(high)}), not {shown(value)}"
    )


def _plain(number: float) -> str:
    """Write a bound as people do: 1000000, not 1e+06."""
    return str(int(number)) if float(number).is_integer() else repr(number)
