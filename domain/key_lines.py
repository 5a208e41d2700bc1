r"""Key lines: the candidate lines a preview shows from the omitted middle (S1.6).

A line is a candidate when one of the policy's key-line patterns matches its
first `KEY_LINE_SCAN_CHARS` characters, judged as a terminal shows it (colour
codes and overwritten progress removed, see `terminal`), so `\x1b[31mFAILED`
is a candidate like `FAILED`. Only the first and the last
`2 * max_key_lines` candidates are kept; the preview picks among those.
`KeyLineScanner` finds them in a byte stream with bounded memory;
`scan_key_lines` / `scan_region` in a text. Both agree on every input.

A line a recognizer rule matches (see `recognizers`) is a key line too, and
its recognition is kept beside it; every recognized line of the whole output,
kept or not, counts towards the `OutputFacts` (`KeyLineScan.facts`).
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from . import screen
from .key_line_groups import kept_per_end, max_groups
from .key_line_match import SCAN_CHARS, _utf8
from .policy import fold_case
from .recognizers import FactTally, OutputFacts, Recognition
from .terminal import clean_terminal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from .policy import SpillPolicy

KeyLine = tuple[int, str]
"""(1-based line number, the line's scanned text)"""
_Found = tuple[int, str, Recognition | None]
"""A kept key line and its recognition, if a rule matched it."""

KEY_LINE_SCAN_CHARS: Final = SCAN_CHARS  # a line is matched on its first 500 characters
_JUDGED_CHARS: Final = SCAN_CHARS + 1  # and the one after, a recognizer's context
KEY_LINE_SCAN_BYTES: Final = 4 * _JUDGED_CHARS  # always holds those characters
BACK_WINDOW: Final = 16 * 1024
"""Bytes a block's last candidates are first looked for in (then 4x, 16x, ...)."""
_SLAB: Final = 1 << 20  # characters of a region split into lines at a time


@dataclass(frozen=True)
class KeyLineScan:
    """What a scan found: key lines, what recognized each, facts of the whole."""

    key_lines: tuple[KeyLine, ...] = ()
    recognitions: Mapping[int, Recognition] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Line number -> recognition, for the key lines a recognizer matched."""
    facts: OutputFacts = field(default_factory=OutputFacts)
    group_lines: tuple[KeyLine, ...] = ()
    """The first recognized lines of each group (`GroupTally`), in line order."""
    group_counts: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """Recognized lines per group over the whole output."""


def _scan_of(found: tuple[_Found, ...], tally: FactTally) -> KeyLineScan:
    members = sorted(tally.groups.members(), key=lambda member: member[0])
    recognitions = {n: rec for n, _, rec in members if isinstance(rec, Recognition)}
    recognitions.update({n: rec for n, _, rec in found if rec is not None})
    return KeyLineScan(
        key_lines=tuple((number, text) for number, text, _ in found),
        recognitions=MappingProxyType(recognitions),
        facts=tally.facts(),
        group_lines=tuple((number, text) for number, text, _ in members),
        group_counts=MappingProxyType(tally.groups.counts()),
    )


def _recognition(verdict: Recognition | bool) -> Recognition | None:  # noqa: FBT001 - a judge's verdict
    return verdict if isinstance(verdict, Recognition) else None


class _Collector:
    """Keep the first 2k and the last 2k key-line candidates, in line order.

    With an `edge` of n bytes it also keeps every candidate that starts in
    the first n bytes or in the last n bytes seen, and counts neither group
    among the 2k: a preview shows at most that much at each end, so the first
    and the last 2k candidates of whatever it leaves out are always kept.
    Candidates come in line order, each with bounds on its start offset
    (`low` <= start <= `high`); an edge keeps at most O(n) candidates.
    """

    def __init__(self, max_key_lines: int, edge: int = 0) -> None:
        self._cap = kept_per_end(max_key_lines)
        self._edge = edge
        self._near_start: list[_Found] = []
        self._first: list[_Found] = []
        self._last: deque[_Found] = deque(maxlen=self._cap)
        self._near_end: deque[tuple[int, _Found]] = deque()  # (high, line)

    @property
    def cap(self) -> int:
        """How many candidates each end keeps."""
        return self._cap

    @property
    def edge(self) -> int:
        """Bytes at each end whose candidates are all kept."""
        return self._edge

    def room_in_first(self) -> int:
        """How many candidates the first group still takes."""
        return self._cap - len(self._first)

    def add(
        self,
        number: int,
        text: str,
        low: int = 0,
        high: int = 0,
        recognition: Recognition | None = None,
    ) -> None:
        """Record one matching line, starting at a byte offset in [low, high]."""
        if self._cap == 0:
            return
        line = (number, text, recognition)
        if low < self._edge:
            self._near_start.append(line)
        elif len(self._first) < self._cap:
            self._first.append(line)
        elif self._edge:
            self._near_end.append((high, line))
        else:
            self._last.append(line)

    def copy(self) -> _Collector:
        """Return an independent copy."""
        clone = copy.copy(self)
        clone._near_start = list(self._near_start)  # noqa: SLF001
        clone._first = list(self._first)  # noqa: SLF001
        clone._last = self._last.copy()  # noqa: SLF001
        clone._near_end = self._near_end.copy()  # noqa: SLF001
        return clone

    def advance(self, seen: int) -> None:
        """Say `seen` bytes have gone by: older candidates leave the end's edge."""
        horizon = seen - self._edge
        while self._near_end and self._near_end[0][0] < horizon:
            self._last.append(self._near_end.popleft()[1])

    def snapshot(
        self, extra: tuple[int, str, int, Recognition | None] | None = None
    ) -> tuple[_Found, ...]:
        """Return the kept candidates, and `extra` (a later line, its start)."""
        if self._cap == 0:
            return ()
        near_start, first = list(self._near_start), list(self._first)
        last, near_end = list(self._last), [line for _, line in self._near_end]
        if extra is not None:
            number, text, start, recognition = extra
            line = (number, text, recognition)
            if start < self._edge:
                near_start.append(line)
            elif len(first) < self._cap:
                first.append(line)
            elif self._edge:
                near_end.append(line)
            else:
                last = [*last, line][-self._cap :]
        return tuple(near_start + first + last + near_end)


class KeyLineScanner:
    """Find key-line candidates in a byte stream, with bounded memory (S1.6).

    `edge`: bytes at each end of the stream whose candidates are all kept
    besides the first and last 2k (see `_Collector`); a preview whose head and
    tail each come from at most that many bytes then gets every candidate it
    could show. Chunks are judged once more than `edge` bytes follow them, so
    only the stream's last `edge` bytes are judged line by line, once, when
    the result is asked for; until then they are held (with the chunk they
    start in).
    """

    def __init__(
        self, policy: SpillPolicy, *, back_window: int = BACK_WINDOW, edge: int = 0
    ) -> None:
        self._policy = policy
        self._judge_line = policy.judge_key_line
        self._recognizers = policy.recognizers
        self._tally = FactTally(policy.recognizers, max_groups(policy.max_key_lines))
        self._found = _Collector(policy.max_key_lines, edge)
        self._back_window = back_window
        self._fast = screen.AVAILABLE and policy.key_line_screen is not None
        self._screen = screen.screen_for(policy.recognizers.specs)
        self._line = 1
        self._seen = 0  # bytes fed so far
        self._judged = 0  # bytes judged so far
        self._unjudged: deque[tuple[bytes, int | None]] = deque()
        self._line_start = 0  # byte offset of the current line
        self._buffer = bytearray()
        self._pending = False  # bytes seen since the last newline

    @property
    def edge(self) -> int:
        """Bytes at each end of the stream whose candidates are all kept."""
        return self._found.edge

    def feed(self, data: bytes, newlines: int | None = None) -> None:
        """Scan the next chunk; lines end at newline bytes and may span chunks.

        `newlines`, when given, is the chunk's count of newline bytes.
        """
        self._seen += len(data)
        if not self._found.edge:
            self._judge(data, newlines, final=False)
            return
        self._unjudged.append((data, newlines))
        while self._seen - self._judged - len(self._unjudged[0][0]) >= self.edge:
            chunk, count = self._unjudged.popleft()
            self._judge(chunk, count, final=False)

    def result(self) -> tuple[KeyLine, ...]:
        """Return the candidates so far (an unterminated last line included)."""
        return self.scan().key_lines

    def scan(self) -> KeyLineScan:
        """Return the candidates, their recognitions and the facts so far."""
        if self._unjudged:
            return self._judged_to_the_end().scan()
        extra = None
        tally = self._tally
        if self._pending:
            judged = self._current()
            verdict = self._judge_line(judged)
            if verdict:
                text = judged[:KEY_LINE_SCAN_CHARS]
                extra = (self._line, text, self._line_start, _recognition(verdict))
            if isinstance(verdict, Recognition):
                tally = tally.copy()
                line = self._line
                tally.add(verdict, judged[:KEY_LINE_SCAN_CHARS], lambda: line)
        return _scan_of(self._found.snapshot(extra), tally)

    def _judged_to_the_end(self) -> KeyLineScanner:
        """Return a copy that has judged every chunk (this one may be fed more)."""
        clone = copy.copy(self)
        clone._found = self._found.copy()  # noqa: SLF001
        clone._tally = self._tally.copy()  # noqa: SLF001
        clone._buffer = bytearray(self._buffer)  # noqa: SLF001
        clone._unjudged = deque()  # noqa: SLF001
        for chunk, count in self._unjudged:
            clone._judge(chunk, count, final=True)  # noqa: SLF001
        return clone

    def _judge(self, data: bytes, newlines: int | None, *, final: bool) -> None:
        """Judge the lines of the next chunk; `final`: it is in the end's edge."""
        base = self._judged
        self._judged += len(data)
        first = data.find(b"\n")
        if first < 0:
            self._keep(data, 0, len(data))
            return
        self._keep(data, 0, first)
        self._end_line()
        last = data.rfind(b"\n")
        if last > first:
            # The whole lines strictly between the first and the last newline.
            inner = data.count(b"\n") if newlines is None else newlines
            if self._fast and _plain_ascii(data):
                block = _AsciiBlock(data, first + 1, last, inner - 1, self)
                for index, scanned, at, rec in block.key_lines(base, final=final):
                    self._found.add(self._line + index, scanned, at, at, rec)
            else:
                # Decoding whole lines at once equals decoding each (b"\n"
                # never sits inside a UTF-8 sequence).
                text = data[first + 1 : last].decode("utf-8", "replace")
                # Every line takes at least its newline byte: bounds on where
                # line `index` of `inner - 1` starts.
                low, high = base + first + 1, base + last - (inner - 2)
                for index, scanned, rec in _key_lines_in(
                    text, self._policy, self._tally, self._line
                ):
                    self._found.add(
                        self._line + index, scanned, low + index, high + index, rec
                    )
            self._line += inner - 1
        self._line_start = base + last + 1
        self._found.advance(self._seen)
        self._keep(data, last + 1, len(data))

    def _keep(self, data: bytes, start: int, stop: int) -> None:
        """Add data[start:stop] to the current line, up to the scanned length."""
        if stop > start:
            self._pending = True
            room = KEY_LINE_SCAN_BYTES - len(self._buffer)
            if room > 0:
                self._buffer += memoryview(data)[start : min(stop, start + room)]

    def _current(self) -> str:
        """Return the judged part of the current line (see `judge_key_line`)."""
        text = clean_terminal(self._buffer.decode("utf-8", "replace"))
        return text[:_JUDGED_CHARS]

    def _end_line(self) -> None:
        """Judge the finished line and start the next."""
        judged = self._current()
        verdict = self._judge_line(judged)
        if verdict:
            start, text = self._line_start, judged[:KEY_LINE_SCAN_CHARS]
            rec = _recognition(verdict)
            self._found.add(self._line, text, start, start, rec)
            if rec is not None:
                line = self._line
                self._tally.add(rec, text, lambda: line)
        self._line += 1
        self._buffer.clear()
        self._pending = False


def _plain_ascii(data: bytes) -> bool:
    """Tell whether `data` is ASCII with no escape or carriage return (memchr speed)."""
    return data.isascii() and b"\x1b" not in data and b"\r" not in data


class _AsciiBlock:
    """Whole ASCII lines data[start:stop] (`lines` of them), judged fast.

    Only lines holding a screen hit can match. Lines are judged front to
    back until the first candidates are taken; after that only the block's
    last candidates can be kept, so the rest is judged from its end
    backwards, one window at a time, stopping as soon as they are found.
    Candidates near the stream's edges (see `_Collector`) are all judged and
    do not count towards either group. Every line a recognizer rule hits is
    judged once for the facts: in the forward pass, or in one pass of the
    rules alone over what the forward pass left.
    """

    def __init__(
        self, data: bytes, start: int, stop: int, lines: int, scanner: KeyLineScanner
    ) -> None:
        self.data, self.start, self.stop, self.lines = data, start, stop, lines
        self.judge: Callable[[str], Recognition | bool] = scanner._judge_line  # noqa: SLF001
        self.screen = scanner._screen  # noqa: SLF001
        self.tally = scanner._tally  # noqa: SLF001
        found = scanner._found  # noqa: SLF001
        self.room, self.cap, self.edge = found.room_in_first(), found.cap, found.edge
        self.window = scanner._back_window  # noqa: SLF001
        self.seen = scanner._seen  # noqa: SLF001 - where the stream ends for now
        self.first_line = scanner._line  # noqa: SLF001 - the number of line 0
        self._counted = (start, 0)  # newlines in data[start:offset]: (offset, n)

    def number_at(self, line_start: int) -> int:
        """Return the number of the line starting at `line_start` (ascending calls)."""
        offset, newlines = self._counted
        newlines += self.data.count(b"\n", offset, line_start)
        self._counted = (line_start, newlines)
        return self.first_line + newlines

    def key_lines(
        self, base: int, *, final: bool
    ) -> list[tuple[int, str, int, Recognition | None]]:
        """Return (0-based line index in the block, scanned text, byte offset, rec).

        `final`: the block is in the stream's last edge (see `_Collector`).
        """
        forward, judged = self._forward(base) if self.room else ([], self.start)
        if judged <= self.stop:
            self._tally_rest(judged)
        numbered = self._numbered_from_start(forward, base)
        if judged > self.stop:  # every line judged
            return numbered
        return numbered + self._backward(judged, base, final=final)

    def _forward(
        self, base: int
    ) -> tuple[list[tuple[int, str, Recognition | None]], int]:
        found: list[tuple[int, str, Recognition | None]] = []
        taken = 0  # found past the start's edge: those fill the first group
        judged = self.start  # lines starting before this offset are judged
        near_start = self.edge - base  # lines starting before this are near it

        def visit(at: int) -> bool:
            nonlocal judged, taken
            if at < judged:
                return False
            line_start, line_end, scanned = self._line_at(at)
            judged = line_end + 1
            verdict = self.judge(scanned)
            if verdict:
                text = scanned[:KEY_LINE_SCAN_CHARS]
                rec = _recognition(verdict)
                found.append((line_start, text, rec))
                if rec is not None:
                    self.tally.add(rec, text, lambda: self.number_at(line_start))
                taken += line_start >= near_start
            return taken == self.room

        self.screen.each_hit(self.data, self.start, self.stop, visit)
        if taken < self.room:
            judged = self.stop + 1
        return found, judged

    def _tally_rest(self, judged: int) -> None:
        """Judge, for the facts, the lines a rule hits in data[judged:stop]."""
        below = judged  # lines starting before this are judged
        for at in self.screen.rule_hits(self.data, judged, self.stop):
            if at < below:
                continue
            line_start, line_end, scanned = self._line_at(at)
            below = line_end + 1
            verdict = self.judge(scanned)
            if isinstance(verdict, Recognition):
                self.tally.add(
                    verdict,
                    scanned[:KEY_LINE_SCAN_CHARS],
                    lambda start=line_start: self.number_at(start),  # type: ignore[misc]
                )

    def _backward(
        self, judged: int, base: int, *, final: bool
    ) -> list[tuple[int, str, int, Recognition | None]]:
        found: list[tuple[int, str, int, Recognition | None]] = []
        taken = 0  # found before the end's edge: those fill the last group
        # Lines starting at or after `near_end` are in the end's edge.
        near_end = self.seen - self.edge - base if final else self.stop + 1
        below = self.stop + 1  # lines starting at or after this are judged
        after, counted = 0, self.stop  # newlines in data[counted:stop]
        high, width = self.stop, self.window
        while high > judged and taken < self.cap:
            low = max(judged, high - width)
            for at in reversed(self.screen.hit_offsets(self.data, low, high)):
                if at >= below:
                    continue
                line_start, _, scanned = self._line_at(at)
                below = line_start
                verdict = self.judge(scanned)
                if verdict:
                    after += self.data.count(b"\n", line_start, counted)
                    counted = line_start
                    text, rec = scanned[:KEY_LINE_SCAN_CHARS], _recognition(verdict)
                    index = self.lines - 1 - after
                    found.append((index, text, base + line_start, rec))
                    taken += line_start < near_end
                    if taken == self.cap:
                        break
            high, width = low, width * 4
        return found[::-1]

    def _line_at(self, at: int) -> tuple[int, int, str]:
        """Return (start, end, judged text) of the line holding offset `at`."""
        data = self.data
        start = max(data.rfind(b"\n", self.start, at) + 1, self.start)
        end = data.find(b"\n", at, self.stop)
        end = self.stop if end < 0 else end
        head = data[start : min(end, start + _JUDGED_CHARS)]
        return start, end, head.decode("ascii")

    def _numbered_from_start(
        self, found: list[tuple[int, str, Recognition | None]], base: int
    ) -> list[tuple[int, str, int, Recognition | None]]:
        numbered: list[tuple[int, str, int, Recognition | None]] = []
        index, counted = 0, self.start
        for line_start, text, rec in found:
            index += self.data.count(b"\n", counted, line_start)
            counted = line_start
            numbered.append((index, text, base + line_start, rec))
        return numbered


def _scanned_bytes_only(block: str) -> str:
    """Cut each line with terminal controls to the bytes a scanner keeps of it.

    The scanner judges a line by its first `KEY_LINE_SCAN_BYTES` bytes, so a
    carriage return past them cannot overwrite what it sees; a line judged
    whole must not see that overwrite either. A line without controls shows
    its first characters whatever comes after, so only these lines are cut.
    """
    if "\r" not in block and "\x1b" not in block:
        return block
    lines = block.split("\n")
    for index, line in enumerate(lines):
        if len(line) > KEY_LINE_SCAN_CHARS and ("\r" in line or "\x1b" in line):
            head = line.encode("utf-8", "surrogatepass")[:KEY_LINE_SCAN_BYTES]
            lines[index] = head.decode("utf-8", "replace")
    return "\n".join(lines)


def _key_lines_in(
    block: str, policy: SpillPolicy, tally: FactTally, first_line: int
) -> Iterator[tuple[int, str, Recognition | None]]:
    """Yield (0-based index, scanned text, recognition) of block's key lines.

    Every recognized line of the block is added to `tally`, in order; the
    block's first line is number `first_line`.
    """
    # Both keep every newline: line indices stay.
    block = clean_terminal(_scanned_bytes_only(block))
    lines = block.split("\n")
    for index in _candidates(block, lines, policy):
        judged = lines[index][:_JUDGED_CHARS]
        verdict = policy.judge_key_line(judged)
        if verdict:
            text, rec = judged[:KEY_LINE_SCAN_CHARS], _recognition(verdict)
            if rec is not None:
                number = first_line + index
                tally.add(rec, text, lambda: number)  # noqa: B023 - called at once
            yield index, text, rec


def _candidates(block: str, lines: list[str], policy: SpillPolicy) -> list[int] | range:
    """Return the indices of the lines that may be key lines, ascending."""
    words = policy.key_line_screen
    if words is None or not screen.AVAILABLE:
        return range(len(lines))
    # Only lines a word or a rule hits are matched for real.
    folded = fold_case(block)  # never adds or removes a newline
    hits: set[int] = set()
    index = counted = pos = 0
    while (hit := words.search(folded, pos)) is not None:
        index += folded.count("\n", counted, hit.start())
        counted = hit.start()
        hits.add(index)
        pos = folded.find("\n", hit.start()) + 1
        if pos == 0:
            break
    rules = screen.screen_for(policy.recognizers.specs)
    if rules.rules:
        data = _utf8(block)  # a rule's judge reads the same UTF-8
        index = counted = 0
        for at in rules.rule_hits(data, 0, len(data)):
            index += data.count(b"\n", counted, at)
            counted = at
            hits.add(index)
    return sorted(hits)


def _scan_region(
    text: str, start: int, end: int, first_line: int, policy: SpillPolicy
) -> KeyLineScan:
    """Scan text[start:end] line by line, as KeyLineScanner scans its bytes."""
    if text.isascii():  # O(1) on a str: the scanner's fast path applies
        scanner = KeyLineScanner(policy)
        for pos in range(start, end, _SLAB):
            scanner.feed(text[pos : min(end, pos + _SLAB)].encode("ascii"))
        scan = scanner.scan()
        shift = first_line - 1
        return KeyLineScan(
            key_lines=tuple((shift + n, line) for n, line in scan.key_lines),
            recognitions=MappingProxyType(
                {shift + n: rec for n, rec in scan.recognitions.items()}
            ),
            facts=scan.facts,
            group_lines=tuple((shift + n, line) for n, line in scan.group_lines),
            group_counts=scan.group_counts,
        )
    found = _Collector(policy.max_key_lines)
    tally = FactTally(policy.recognizers, max_groups(policy.max_key_lines))
    number, pos = first_line, start
    while pos < end:
        # A slab at a time, so a huge region never becomes one huge list.
        stop = text.find("\n", min(pos + _SLAB, end), end)
        stop = end if stop < 0 else stop + 1
        # Lines are the pieces between newlines: none after a final newline.
        block = text[pos : stop - 1] if text[stop - 1] == "\n" else text[pos:stop]
        for index, scanned, rec in _key_lines_in(block, policy, tally, number):
            found.add(number + index, scanned, recognition=rec)
        number += block.count("\n") + 1
        pos = stop
    return _scan_of(found.snapshot(), tally)


def scan_region(
    text: str, start: int, end: int, first_line: int, policy: SpillPolicy
) -> tuple[KeyLine, ...]:
    """Scan text[start:end] line by line, as KeyLineScanner scans its bytes."""
    return _scan_region(text, start, end, first_line, policy).key_lines


def scan_region_facts(
    text: str, start: int, end: int, first_line: int, policy: SpillPolicy
) -> KeyLineScan:
    """Scan text[start:end] as `scan_region` does; with recognitions and facts."""
    return _scan_region(text, start, end, first_line, policy)


def scan_key_lines(text: str, policy: SpillPolicy) -> tuple[KeyLine, ...]:
    """Return the key-line candidates of a whole text (same as KeyLineScanner)."""
    return _scan_region(text, 0, len(text), 1, policy).key_lines


def scan_text(text: str, policy: SpillPolicy) -> KeyLineScan:
    """Return a whole text's key lines, their recognitions and its facts."""
    return _scan_region(text, 0, len(text), 1, policy)
