"""Caps for what reaches a model or a terminal (S3.5); library calls stay exact."""

from __future__ import annotations

from dataclasses import dataclass

LINE_CUT_MARKER = " … [line cut: {hidden} more characters]"


@dataclass(frozen=True)
class CappedLines:
    """Lines fitted into a character budget, and where to continue if cut short."""

    text: str
    shown: int
    next_start_line: int | None


def cap_lines(
    lines: list[str], *, first_line: int, budget: int, max_line: int
) -> CappedLines:
    """Fit 1-based numbered `lines` into `budget` characters, cutting long lines."""
    out: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        shown = line
        if len(line) > max_line:
            hidden = len(line) - max_line
            shown = line[:max_line] + LINE_CUT_MARKER.format(hidden=hidden)
        cost = len(shown) + 1
        if out and used + cost > budget:
            return CappedLines("\n".join(out), index, first_line + index)
        out.append(shown)
        used += cost
    return CappedLines("\n".join(out), len(lines), None)
