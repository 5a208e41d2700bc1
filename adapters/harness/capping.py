"""Caps for what reaches a model or a terminal (S3.5); library calls stay exact."""

from __future__ import annotations

from dataclasses import dataclass

from spillvault.domain.graphemes import back_off_cluster

LINE_CUT_MARKER = " … [line cut: {hidden} more characters]"


@dataclass(frozen=True)
class CappedLines:
    """Lines fitted into a character budget, and where to continue if cut short."""

    text: str
    shown: int
    next_start_line: int | None


def cap_line(line: str, max_line: int) -> str:
    """Return `line`, or its first `max_line` characters and how many were cut."""
    if len(line) <= max_line:
        return line
    # Never half a cluster: the marker then counts exactly what is hidden.
    cut = back_off_cluster(line, max_line)
    return line[:cut] + LINE_CUT_MARKER.format(hidden=len(line) - cut)


def cap_lines(
    lines: list[str], *, first_line: int, budget: int, max_line: int
) -> CappedLines:
    """Fit 1-based numbered `lines` into `budget` characters, cutting long lines."""
    out: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        shown = cap_line(line, max_line)
        cost = len(shown) + 1
        if out and used + cost > budget:
            return CappedLines("\n".join(out), index, first_line + index)
        out.append(shown)
        used += cost
    return CappedLines("\n".join(out), len(lines), None)
