"""Reading a gate's view back: its parts, and the same view for another artifact."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spillvault.domain.values import ArtifactReference

NOTICE = re.compile(
    r"^\[\.\.\. (\d+) (?:chars|bytes|tokens) omitted, (\d+) lines"
    r"(?: \(lines (\d+)-(\d+)\))?; full output: [^\n]*\]\n",
    re.MULTILINE,
)
KEY_BLOCK = re.compile(r"\[key lines from the omitted part: (\d+)\]\n")
KEY_LINE = re.compile(r"line (\d+): (.*)")
NOTE = re.compile(
    r"\[\.\.\. (?:at least )?\d+ more like line \d+: grep_artifact\(.*\)\]"
)
# The header's optional lines between the first and the summary (S1.6).
FACTS_LINE = re.compile(r"\[(?:exit -?\d+ \u00b7 )?[\d,]+ lines? \u00b7 [^\n]*\]")
LISTING_LINE = re.compile(r"\[listing: [^\n]*\]")


@dataclass(frozen=True)
class View:
    """A view's parts: header, head, notice figures, key lines, tail."""

    header: str
    head: str
    omitted_units: int
    omitted_lines: int
    span: tuple[int, int] | None
    key_lines: list[tuple[int, str]]
    tail: str


def parse_view(view: str) -> View:
    """Split a view (header, head, notice, key lines, tail) into its parts."""
    first, second, rest = view.split("\n", 2)
    extra = ""
    while FACTS_LINE.fullmatch(second) or LISTING_LINE.fullmatch(second):
        extra += second + "\n"
        second, rest = rest.split("\n", 1)
    notice = NOTICE.search(rest)
    assert notice is not None, rest[:300]
    assert rest[notice.start() - 1] == "\n"  # a newline always ends the head
    head, after = rest[: notice.start() - 1], rest[notice.end() :]
    key_lines = []
    block = KEY_BLOCK.match(after)
    if block:
        after = after[block.end() :]
        for _ in range(int(block[1])):
            line, _, after = after.partition("\n")
            if NOTE.fullmatch(line):
                continue
            found = KEY_LINE.fullmatch(line)
            assert found is not None, line
            key_lines.append((int(found[1]), found[2]))
    span = None if notice[3] is None else (int(notice[3]), int(notice[4]))
    return View(
        header=f"{first}\n{extra}{second}\n",
        head=head,
        omitted_units=int(notice[1]),
        omitted_lines=int(notice[2]),
        span=span,
        key_lines=key_lines,
        tail=after,
    )


def as_if_for(view: str, actual: ArtifactReference, wanted: ArtifactReference) -> str:
    """Return `view` naming `wanted` where it names `actual` (handle, source id)."""
    return view.replace(actual.source.source_id, wanted.source.source_id).replace(
        actual.handle, wanted.handle
    )
