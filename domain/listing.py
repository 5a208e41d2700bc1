"""A short structural summary of a listing output, so the next grep is well aimed.

`grep -rn` prints `path:line:text`, `find`, `tar -t` and `git ls-files` print
paths, `tar -tv` prints a path after mode, owner, size and time, `ls -lR` long
entries under `dir:` headers, `git log` prints `commit <sha>` blocks. For such
an output the preview says how many matches, paths, entries or commits there
are and where they sit: the top directories (or files) by count. A listing is
recognized from a sample of its first lines (most of them must have the shape);
the counts then come from one regex pass over the whole text (an `ls -lR` entry
counts under the header above it).
"""

from __future__ import annotations

import codecs
import re
from collections import Counter
from dataclasses import dataclass
from typing import Final

SAMPLE_LINES: Final = 200
SAMPLE_CHARS: Final = 64 * 1024
SHAPE_SHARE: Final = 0.8
"""At least this share of the sampled non-empty lines must have the shape."""
TOP_SHOWN: Final = 5
MB: Final = 1 << 20
MAX_COUNTED: Final = 16 * MB
"""Characters counted at most: a listing's counts cost ~15 ms a MB."""
_MIN_SAMPLE: Final = 20  # fewer lines prove nothing about a shape


@dataclass(frozen=True)
class _Shape:
    """One kind of listing: how its lines look, and what it counts."""

    line: re.Pattern[str]  # matches a sampled line of this kind at its start
    entry: str  # a regex for one entry; group 1 is its path (or its group)
    noun: str  # what an entry is
    group: tuple[str, str]  # what a group is: one, many
    paths: bool = True  # entries are paths, grouped by their first part
    # A regex for a section's header line, group 1 its directory: the entries
    # below it (the entry regex then has no group) count under that directory.
    header: str | None = None


_GREP: Final = _Shape(
    re.compile(r"[^\s:]*[./][^\s:]*:\d+[:-]"),
    r"^(?:\./)?([^\n:]*):\d+:",
    "matches",
    ("top-level path", "top-level paths"),
)
_GIT_LOG: Final = _Shape(
    re.compile(r"commit [0-9a-f]{7,64}\b|Author: |Date: |Merge: |    |\Z"),
    r"^Author: ([^<\n]*?)\s*(?:<|$)",
    "commits",
    ("author", "authors"),
    paths=False,
)
_PATHS: Final = _Shape(
    re.compile(r"[^\s:]*/[^\s:]*\Z"),
    r"^(?:\./)?([^\n]*)",
    "paths",
    ("top-level path", "top-level paths"),
)
_MODE: Final = r"[-a-zA-Z?][-rwxsStT]{9}\S*"  # type, permissions, an ACL mark
_TAR_HEAD: Final = (
    _MODE + r" \S+/\S+ +\d+(?:,\d+)? \d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)? "
)
_TAR_VERBOSE: Final = _Shape(
    re.compile(_TAR_HEAD),
    # A link's target is no path of the archive. A name holding ` -> ` or
    # ` link to ` is cut there too: rare, and the path is still counted.
    rf"^{_TAR_HEAD}(?:\./)?([^\n]*?)(?: -> | link to |$)",
    "paths",
    ("top-level path", "top-level paths"),
)
_LS_RECURSIVE: Final = _Shape(
    re.compile(_MODE + r" +\d+ |total \d|[^\n]*:\Z"),
    rf"^{_MODE} +\d+ ",
    "entries",
    ("top-level path", "top-level paths"),
    header=rf"^(?!{_MODE})(?:\./)?([^\n]*?)/?:$",
)
_SHAPES: Final = (_GREP, _GIT_LOG, _PATHS, _TAR_VERBOSE, _LS_RECURSIVE)
_COMMIT: Final = re.compile(r"^commit [0-9a-f]{7,64}\b", re.MULTILINE)


def listing_summary(text: str) -> str | None:
    """Return `[listing: …]` for a listing output, else None."""
    counter = ListingCounter()
    counter.feed_text(text)
    return counter.summary()


class ListingCounter:
    """Count a listing's entries as its output streams by, in bounded memory.

    The first `SAMPLE_CHARS` are held until the shape is known; an output of
    another shape costs nothing more. At most `MAX_COUNTED` characters are
    counted, and only whole lines (a line longer than `SAMPLE_CHARS` is no entry).
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending: list[str] = []
        self._pending_chars = 0
        self._decided = False
        self._shape: _Shape | None = None
        self._entry: re.Pattern[str] | None = None
        self._header: re.Pattern[str] | None = None
        self._section = ""  # the directory of the last header counted
        self._carry = ""
        self._seen = 0
        self._counted = 0
        self._counts: Counter[str] = Counter()
        self._commits = 0

    def feed(self, data: bytes) -> None:
        """Take the next bytes of the output."""
        if not self._done():
            self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> None:
        """Take the next characters of the output."""
        self._seen += len(text)
        if self._done():
            return
        if not self._decided:
            self._pending.append(text)
            self._pending_chars += len(text)
            if self._pending_chars < SAMPLE_CHARS:
                return
            text = self._decide()
            if self._shape is None:
                return
        self._count(text)

    def summary(self) -> str | None:
        """Return `[listing: …]` for what was fed, if it is a listing."""
        if not self._decided:
            self._count(self._decide())
        if self._shape is None:
            return None
        if self._carry and self._counted < MAX_COUNTED:
            self._count_lines(self._carry)
            self._carry = ""
        return _render(self._shape, self._counts, self._commits, self._seen)

    def _done(self) -> bool:
        return self._decided and (self._shape is None or self._counted >= MAX_COUNTED)

    def _decide(self) -> str:
        """Settle the shape from the held text; return that text."""
        text = "".join(self._pending)
        self._pending, self._decided = [], True
        self._shape = _shape_of(_sample(text))
        if self._shape is not None:
            self._entry = re.compile(self._shape.entry, re.MULTILINE)
            if self._shape.header is not None:
                self._header = re.compile(self._shape.header, re.MULTILINE)
        return text

    def _count(self, text: str) -> None:
        if self._shape is None:
            return
        text = self._carry + text
        cut = text.rfind("\n") + 1
        self._carry = text[cut:] if len(text) - cut <= SAMPLE_CHARS else ""
        self._count_lines(text[:cut])

    def _count_lines(self, text: str) -> None:
        assert self._entry is not None  # noqa: S101 - set with the shape
        text = text[: MAX_COUNTED - self._counted]
        self._counted += len(text)
        if self._header is not None:
            self._count_sections(text, self._entry, self._header)
        else:
            self._counts.update(self._entry.findall(text))
        if self._shape is _GIT_LOG:
            self._commits += len(_COMMIT.findall(text))

    def _count_sections(
        self, text: str, entry: re.Pattern[str], headers: re.Pattern[str]
    ) -> None:
        """Count each entry under the header above it, maybe in an earlier piece."""
        start = 0
        for header in headers.finditer(text):
            self._count_section(len(entry.findall(text, start, header.start())))
            self._section = header[1] + "/"
            start = header.end()
        self._count_section(len(entry.findall(text, start)))

    def _count_section(self, entries: int) -> None:
        # An empty directory would otherwise show as a group of 0 entries.
        if entries:
            self._counts[self._section] += entries


def _render(shape: _Shape, counts: Counter[str], commits: int, seen: int) -> str | None:
    """Render the summary line of a listing's counts (None when nothing counted)."""
    counts.pop("", None)
    prefix = ""
    if shape.paths and counts:
        prefix = _common_directory(list(counts))
        counts = _by_first_part(counts, len(prefix))
    total = commits if shape is _GIT_LOG else counts.total()
    if not total:
        return None
    top = counts.most_common(TOP_SHOWN)
    shown = ", ".join(f"{name} {count:,}" for name, count in top)
    rest = len(counts) - len(top)
    more = f"; {rest:,} more" if rest > 0 else ""
    under = f" under {prefix}" if prefix else ""
    group = shape.group[len(counts) != 1]
    cut = f" in the first {MAX_COUNTED // MB} MB" if seen > MAX_COUNTED else ""
    return (
        f"[listing: {total:,} {shape.noun}{cut}, {len(counts):,} {group}{under}; "
        f"most: {shown}{more}]"
    )


def _sample(text: str) -> list[str]:
    """Return the first non-empty lines of `text`."""
    head = text[:SAMPLE_CHARS].splitlines()[:SAMPLE_LINES]
    return [line for line in head if line]


def _shape_of(sample: list[str]) -> _Shape | None:
    """Return the listing kind most of the sampled lines have, if any."""
    if len(sample) < _MIN_SAMPLE:
        return None
    # Paths (and grep hits) of a listing differ; the same ones again are none.
    distinct = len(set(sample)) >= len(sample) // 2
    for shape in _SHAPES:
        if shape is _GIT_LOG and not sample[0].startswith("commit "):
            continue
        if shape.header is not None:
            # Its entries carry no path: directories alike repeat them.
            if not re.match(shape.header, sample[0]):
                continue
        elif shape.paths and not distinct:
            continue
        fitting = sum(1 for line in sample if shape.line.match(line))
        if fitting >= SHAPE_SHARE * len(sample):
            return shape
    return None


def _common_directory(paths: list[str]) -> str:
    """Return the directory prefix every path shares ("" if none)."""
    first, last = min(paths), max(paths)
    common = 0
    while common < min(len(first), len(last)) and first[common] == last[common]:
        common += 1
    return first[: first.rfind("/", 0, common) + 1]


def _by_first_part(counts: Counter[str], skip: int) -> Counter[str]:
    """Add up the counts of paths by their first part after `skip` characters."""
    grouped: Counter[str] = Counter()
    for path, count in counts.items():
        rest = path[skip:] or "./"  # the common directory itself
        slash = rest.find("/")
        grouped[rest if slash < 0 else rest[: slash + 1]] += count
    return grouped


__all__ = ["ListingCounter", "listing_summary"]
