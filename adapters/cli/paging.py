"""Pages of an artifact for `read` and `grep`: where one ends and the next starts.

Byte pages (`read --bytes`) are cut on UTF-8 character boundaries, so each
page decodes on its own and the pages, joined, are the file:

- A page that would end inside a character ends before it, and its
  `next_byte` is that character's first byte.
- A START inside a character moves back to that character's first byte (at
  most 3 bytes); the page says so (`requested_start` differs from `start`).
  Moving back, not forward, hides no byte the caller asked for.
- A page always holds at least one whole character: when its range is
  shorter than the character at its start, it runs to that character's end
  (at most 3 bytes past the range), so following `next_byte` always advances.

Only a split *valid* character counts; bytes that are not UTF-8 (binary
output) are cut exactly where asked. `read --bytes A:B --raw` moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from spillvault.adapters.harness.capping import cap_line, cap_lines
from spillvault.adapters.harness.model_tools import redact_page
from spillvault.domain.reading import GrepResult

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from spillvault.adapters.session import ToolResultExternalizer
    from spillvault.domain.artifact import ArtifactContent
    from spillvault.domain.reading import GrepMatch

MAX_LINE: Final = 2000
"""Characters of one line shown before the `[line cut: N more characters]` marker."""
GROUP_SEPARATOR: Final = "--"
_MAX_CHARACTER: Final = 4  # bytes of the longest UTF-8 character


@dataclass(frozen=True)
class BytePage:
    """Bytes `[start, end)` of an artifact, and where the next page starts."""

    data: bytes
    requested_start: int
    start: int
    next_byte: int | None
    """The first byte after this page; None only at the end of the artifact."""

    @property
    def end(self) -> int:
        """Return the first byte after the page."""
        return self.start + len(self.data)


def byte_page(
    read: Callable[[int, int], bytes], start: int, end: int, *, budget: int
) -> BytePage:
    """Return the page `[start, end)`, at most `budget` bytes, cut on characters."""
    # `read(a, b)` returns the artifact's bytes [a, b), fewer at its end.
    first = _character_start(read, start)
    stop = max(first, min(end, first + budget))
    # Bytes past the page tell whether it splits a character there (3 at
    # most), and one more whether anything follows a character taken whole.
    data = read(first, stop + _MAX_CHARACTER)
    cut = stop - first
    if cut < len(data):
        lead = _split(data, cut)
        if lead == 0:
            cut = _sequence_length(data[0])  # no whole character fits: take one
        elif lead is not None:
            cut = lead
    more = cut < len(data)
    return BytePage(data[:cut], start, first, first + cut if more else None)


def _character_start(read: Callable[[int, int], bytes], position: int) -> int:
    """Return `position`, or the first byte of the valid character it splits."""
    if position == 0:
        return 0
    low = max(0, position - _MAX_CHARACTER + 1)
    window = read(low, position + _MAX_CHARACTER - 1)
    lead = _split(window, position - low) if position - low < len(window) else None
    return position if lead is None else low + lead


def _split(data: bytes, cut: int) -> int | None:
    """Return where the valid character that a cut before data[cut] splits starts."""
    if not _is_continuation(data[cut]):
        return None
    for lead in range(cut - 1, max(-1, cut - _MAX_CHARACTER), -1):
        if _is_continuation(data[lead]):
            continue
        length = _sequence_length(data[lead])
        if length <= cut - lead:
            return None
        try:
            # Short at the end of the file, or not text: nothing to keep whole.
            data[lead : lead + length].decode("utf-8")
        except UnicodeDecodeError:
            return None
        return lead
    return None


def _is_continuation(byte: int) -> bool:
    """Tell whether `byte` can only continue a UTF-8 character, never start one."""
    return 0x80 <= byte <= 0xBF


def _sequence_length(lead: int) -> int:
    """Return the length of the UTF-8 character `lead` starts, 0 for no lead byte."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


@dataclass(frozen=True)
class LinePage:
    """Lines of an artifact from a 1-based line, capped, and what follows them."""

    text: str
    start_line: int
    lines: int
    total_lines: int | None
    """None while the artifact is still being written (its count is not known)."""
    next_start_line: int | None
    """The first line after this page; None only at the end of the artifact."""
    cut_at_budget: bool


def line_page(  # noqa: PLR0913 - the page, its budget and whether to mask
    ext: ToolResultExternalizer,
    handle: str,
    first: int,
    limit: int,
    *,
    budget: int,
    redact: bool = True,
) -> LinePage:
    """Return up to `limit` lines from 1-based `first`, fitted into `budget`.

    Secrets are masked (S3.6) unless `redact` is False or the policy says so.
    """
    content = stored_content(ext, handle)
    if content is None:
        body = ext.read_artifact(handle, first - 1, limit + 2)
        lines, more = _lines_so_far(body, limit)
        total = None
    else:
        total = content.line_count
        body = ext.read_artifact(handle, first - 1, limit)
        # A final newline ends the last line; it starts no new one (S2.3 counts).
        lines = body.split("\n")[: max(0, min(limit, total - first + 1))]
        more = first - 1 + len(lines) < total
    if redact:
        lines = redact_page(ext, handle, first, lines, total)
    capped = cap_lines(
        lines, first_line=first, budget=budget, max_line=min(MAX_LINE, budget)
    )
    following = capped.next_start_line
    if following is None and more:
        following = first + capped.shown
    return LinePage(
        capped.text,
        first,
        capped.shown,
        total,
        following,
        cut_at_budget=capped.next_start_line is not None,
    )


def _lines_so_far(body: str, limit: int) -> tuple[list[str], bool]:
    """Return `limit` lines of a `limit + 2` piece read, and whether more follow."""
    # An open artifact has no recorded line count. Fewer pieces than asked
    # mean the read reached the end of the file, where an empty last piece is
    # the nothing after a final newline, not a line; a full read shows that
    # piece `limit + 1` ends with a newline, so it is a line that follows.
    pieces = body.split("\n") if body else []
    if len(pieces) < limit + 2 and pieces and not pieces[-1]:
        pieces.pop()
    return pieces[:limit], len(pieces) > limit


def stored_content(ext: ToolResultExternalizer, handle: str) -> ArtifactContent | None:
    """Return what the record says of the artifact's bytes; None while it is open."""
    artifact = ext.session.store.get_artifact(ext.store.resolve(handle))
    return None if artifact is None else artifact.stored_content


def within_lines(result: GrepResult, total: int | None) -> GrepResult:
    """Drop what lies past line `total`: the empty piece after a final newline."""
    # The reader treats that piece as a line (a match for `^$`, or context
    # after the last line); S2.3 counts, and GNU grep prints, no such line.
    if total is None:
        return result
    matches = tuple(
        replace(match, after=match.after[: total - match.line_number])
        for match in result.matches
        if match.line_number <= total
    )
    resume = result.resume_from
    if resume is not None and resume >= total:
        resume = None
    return GrepResult(matches, truncated=resume is not None, resume_from=resume)


def grep_rows(
    matches: Sequence[GrepMatch], *, separators: bool, max_line: int = MAX_LINE
) -> list[str]:
    """Lay matches out as GNU `grep -n -C N` does: `N:match`, `N-context`, `--`."""
    # Overlapping or adjacent context windows merge, so no line shows twice; GNU
    # parts groups that are not adjacent with `--` when a context option is given.
    hits = {match.line_number for match in matches}
    rows: list[str] = []
    last = 0  # the last line printed; lines are 1-based
    for match in matches:
        first = match.line_number - len(match.before)
        window = (*match.before, match.line, *match.after)
        for number, line in enumerate(window, first):
            if number <= last:
                continue
            if separators and rows and number > last + 1:
                rows.append(GROUP_SEPARATOR)
            mark = ":" if number in hits else "-"
            rows.append(f"{number}{mark}{cap_line(line, max_line)}")
            last = number
    return rows


__all__ = [
    "GROUP_SEPARATOR",
    "MAX_LINE",
    "BytePage",
    "LinePage",
    "byte_page",
    "grep_rows",
    "line_page",
    "stored_content",
    "within_lines",
]
