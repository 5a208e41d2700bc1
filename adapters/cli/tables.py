"""Aligned text tables for people: a header row, then one row per record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

MISSING = "-"
_GAP = "  "
_SIZE_UNITS = ("KB", "MB", "GB", "TB", "PB")
_AGE_UNITS = (("d", 86400), ("h", 3600), ("m", 60))


@dataclass(frozen=True)
class Column:
    """One column: its header, how a record shows in it, and its alignment."""

    header: str
    cell: Callable[[Mapping[str, Any]], str]
    right: bool = False


def cell_of(
    name: str, show: Callable[[Any], str] = str
) -> Callable[[Mapping[str, Any]], str]:
    """Return a cell showing record[name] through `show`, or `-` when it is None."""

    def cell(record: Mapping[str, Any]) -> str:
        value = record.get(name)
        return MISSING if value is None else show(value)

    return cell


def render_table(
    columns: Sequence[Column], records: Iterable[Mapping[str, Any]]
) -> list[str]:
    """Return the header line and one line per record, columns aligned."""
    grid = [[column.header for column in columns]]
    grid.extend([column.cell(record) for column in columns] for record in records)
    widths = [max(len(row[i]) for row in grid) for i in range(len(columns))]
    return [
        _GAP.join(
            text.rjust(width) if column.right else text.ljust(width)
            for text, width, column in zip(row, widths, columns, strict=True)
        ).rstrip()
        for row in grid
    ]


def human_size(count: int) -> str:
    """Return a byte count for people: `312 B`, `51.2 KB`, `1.2 MB` (powers of 1000)."""
    if count < 1000:
        return f"{count} B"
    value = count / 1000
    for unit in _SIZE_UNITS[:-1]:
        # Rounding may carry into the next unit: 999960 B is 1.0 MB, not 1000.0 KB.
        if round(value, 1) < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} {_SIZE_UNITS[-1]}"


def age_text(seconds: float) -> str:
    """Return an age in its largest whole unit: `42s`, `5m`, `3h`, `2d`."""
    # A creation time ahead of the clock (skew) shows as 0s, never negative.
    whole = max(0, int(seconds))
    for unit, size in _AGE_UNITS:
        if whole >= size:
            return f"{whole // size}{unit}"
    return f"{whole}s"


__all__ = ["MISSING", "Column", "age_text", "cell_of", "human_size", "render_table"]
