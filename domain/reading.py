"""Results of page-fault reads (S3.1)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GrepMatch:
    """One matching line, 1-based, with its context lines."""

    line_number: int
    line: str
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class GrepResult:
    """Matches in line order; `resume_from` is the 0-based line offset to go on from."""

    matches: tuple[GrepMatch, ...]
    truncated: bool
    resume_from: int | None = None

    @property
    def next_start_line(self) -> int | None:
        """Return the 1-based `start_line` that continues a truncated search."""
        return None if self.resume_from is None else self.resume_from + 1
