"""The spill replacement: header, head, notice, key lines, tail (S1.4, S1.6)."""

# Layout (every part but head and tail is rendered here):
#
#     [tool result stored as <handle>; tool: <name>; sha256: <hex>; source: <id>[; ...]]
#     [exit <s> · <n> lines · <b> bytes · <counts>]    (counts known, room allowing)
#     [listing: <n> matches, <g> top-level paths; most: …]   (a listing, room allowing)
#     [summary: <summary>]
#     [command: <argv>; exit: <status>; duration: <s>]   (a command's output only)
#     <head: a prefix of the output>
#     [... <n> <unit> omitted, <m> lines (lines a-b); full output: <handle>;
#      read: read_artifact(handle=…, start_line=a, limit=…); search:
#      grep_artifact(handle=…, pattern="..."); shell: <hint>]     (one line)
#     [key lines from the omitted part: <k>]      (only when there are some)
#     line <N>: <text>                             (k lines in all, of these
#     [... <m> more like line <N>: grep_artifact(…)]  and notes of collapsed groups)
#     <tail: a suffix of the output>
#
# A newline always separates head and notice, so the layout parses back
# unambiguously. Head, tail and key lines show the output as a terminal would
# (`terminal.clean_terminal`: no escape sequences, overwritten progress lines
# collapsed), line for line, so line numbers stay the artifact's; budgets are
# measured on that cleaned text, and "never larger than the original" on the
# output itself. A whole output whose cleaned text fits shows every line, with
# nothing omitted. <unit> is chars for a chars budget and bytes otherwise (the
# omitted tokens would cost a second full count). Identifiers (source id, tool,
# sha256, tool_use_id, handle, hint) are shown verbatim except that control and
# line-separator characters become backslash escapes, so nothing can break the
# layout; the summary's become spaces.

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Final

from .enums import SizeUnit
from .graphemes import back_off_cluster, forward_off_cluster
from .key_line_groups import Collapsed, group_key, kept_per_end, plan_key_lines
from .key_lines import (
    KEY_LINE_SCAN_CHARS,
    KeyLine,
    KeyLineScan,
    scan_region,
    scan_text,
)
from .listing import listing_summary
from .notice import (
    PreviewSource,
    render_header,
    render_key_lines,
    render_notice,
    widest_notice,
)
from .terminal import clean_terminal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from .policy import SpillPolicy

_MINOR_KINDS: Final = frozenset({"warning", "location"})
LINE_END_WINDOW: Final = 1024  # how far a cut may move to land on a line end
_ROUNDS: Final = 64


@dataclass(frozen=True)
class PreviewText:
    """The output to preview: whole, or a head window and a tail window of it.

    For a whole output a caller that stored it may say what it already knows,
    so the preview never goes over the whole text again: its `line_count` and
    `size_bytes` (UTF-8), and key lines scanned with a `key_line_edge` (see
    `KeyLineScanner`). Without an edge a whole output's omitted part is
    scanned here unless key lines are given. `counts` (what recognizers
    counted) make a facts line; `listing` is a stream's structural summary (a
    whole text's is found here). `group_lines` and `group_counts` are a
    store pass's `GroupTally` (see `KeyLineScan`); a whole text without them
    is tallied here.
    """

    head: str
    tail: str
    whole: bool
    key_lines: tuple[KeyLine, ...] = ()
    line_count: int | None = None
    size_bytes: int | None = None
    key_line_edge: int | None = None
    counts: tuple[tuple[str, int], ...] = ()
    listing: str | None = None  # a stream's `ListingCounter` summary
    group_lines: tuple[KeyLine, ...] = ()
    group_counts: Mapping[str, int] | None = None


# ---------------------------------------------------------------- cutting


def _complete_prefix(data: bytes) -> bytes:
    """Drop a trailing incomplete UTF-8 sequence."""
    lead = len(data) - 1
    while lead >= 0 and 0x80 <= data[lead] < 0xC0:
        lead -= 1
    if lead < 0:
        return b""
    byte = data[lead]
    need = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
    return data if lead + need <= len(data) else data[:lead]


def _decoded_length(data: bytes) -> int:
    """Return how many code points whole UTF-8 (surrogatepass) bytes hold."""
    return len(data.decode("utf-8", "surrogatepass"))


def _largest(fits: Callable[[int], bool], upper: int, start: int) -> int:
    """Return the largest n in [0, upper] with fits(n), fits being monotone."""
    low, high = 0, min(upper, max(start, 16))
    while fits(high):
        if high == upper:
            return high
        low, high = high, min(upper, high * 2)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def _prefix_end(text: str, budget: int, unit: SizeUnit, policy: SpillPolicy) -> int:
    """Return the largest p with size(text[:p]) <= budget."""
    if budget <= 0:
        return 0
    if unit == SizeUnit.CHARS:
        return min(budget, len(text))
    if unit == SizeUnit.BYTES:
        part = text[:budget]  # every character takes at least one byte
        data = part.encode("utf-8", "surrogatepass")
        if len(data) <= budget:
            return len(part)
        return _decoded_length(_complete_prefix(data[:budget]))
    count = policy.token_counter
    return _largest(lambda n: count(text[:n]) <= budget, len(text), budget)


def _suffix_start(
    text: str, budget: int, unit: SizeUnit, policy: SpillPolicy, low: int
) -> int:
    """Return the smallest q >= low with size(text[q:]) <= budget."""
    end = len(text)
    if budget <= 0:
        return end
    if unit == SizeUnit.CHARS:
        return max(low, end - budget)
    if unit == SizeUnit.BYTES:
        start = max(low, end - budget)
        data = text[start:].encode("utf-8", "surrogatepass")
        if len(data) <= budget:
            return start
        data = data[-budget:]
        skip = 0
        while skip < len(data) and 0x80 <= data[skip] < 0xC0:
            skip += 1
        return end - _decoded_length(data[skip:])
    count = policy.token_counter
    return end - _largest(lambda n: count(text[end - n :]) <= budget, end - low, budget)


def _head_cut(text: str, index: int) -> int:
    """Move a head cut back to just after a nearby newline, else off a cluster."""
    if index <= 0:
        return 0
    if index < len(text) and text[index] == "\n":
        return index  # the line is whole already; only its newline is left out
    newline = text.rfind("\n", index - min(LINE_END_WINDOW, index // 4), index)
    if newline >= 0:
        return newline + 1
    return back_off_cluster(text, index)


def _tail_cut(text: str, index: int) -> int:
    """Move a tail cut forward to a nearby line start, else off a cluster."""
    end = len(text)
    if index >= end:
        return end
    if index > 0 and text[index - 1] == "\n":
        return index
    window = min(LINE_END_WINDOW, (end - index) // 4)
    newline = text.find("\n", index, index + window)
    if 0 <= newline < end - 1:  # keep a non-empty tail
        return newline + 1
    return forward_off_cluster(text, index)


# ---------------------------------------------------------------- building


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _nines(value: int) -> int:
    """Return the widest number with as many digits as `value`."""
    return int("9" * len(str(max(value, 0))))


def _cleaned(text: PreviewText, policy: SpillPolicy) -> PreviewText:
    """Return what the preview shows of `text`: cleaned, with key lines still key."""
    head = clean_terminal(text.head)
    tail = head if text.whole else clean_terminal(text.tail)

    # Given key lines were matched on the raw output; a line whose match was
    # overwritten or lay in an escape sequence is no key line on screen.
    def still_key(lines: tuple[KeyLine, ...]) -> tuple[KeyLine, ...]:
        shown = ((number, clean_terminal(line)) for number, line in lines)
        return tuple((n, line) for n, line in shown if policy.is_key_line(line))

    return dataclasses.replace(
        text,
        head=head,
        tail=tail,
        key_lines=still_key(text.key_lines),
        group_lines=still_key(text.group_lines),
    )


@dataclass(frozen=True)
class _Shape:
    """What one cut shows and what it leaves out."""

    head: str
    tail: str
    covered_head: int  # lines 1..covered_head are shown whole in the head
    tail_first: int  # lines tail_first.. are shown whole in the tail
    tail_index: int


class _Builder:
    """The fixed facts of one preview and the cuts it tries."""

    def __init__(
        self, text: PreviewText, source: PreviewSource, policy: SpillPolicy
    ) -> None:
        limit = policy.limit_for(source.tool_name)
        self.source, self.policy = source, policy
        self.unit, self.budget = limit.unit, limit.budget
        if text.whole and text.head != text.tail:
            msg = "a whole PreviewText needs head == tail == the output"
            raise ValueError(msg)
        self.text = _cleaned(text, policy)
        self._whole_scan: KeyLineScan | None = None
        # Line numbers count the output's own newlines (cleaning keeps them,
        # but may empty a last line after the final one).
        self.ends_with_newline = text.tail.endswith("\n")
        if text.whole:
            output, whole = text.head, self.text.head
            self.uncleaned = whole is output
            if text.line_count is None:
                newlines = output.count("\n")
                self.total_lines = newlines + int(not self.ends_with_newline)
            else:
                self.total_lines = text.line_count
            if self.unit == SizeUnit.TOKENS:
                self.cap = min(self.budget, self._tokens_up_to_budget(output))
                # Counting the omitted middle would cost another full count.
                self.notice_unit = SizeUnit.BYTES
                self.total_units = self._whole_bytes(whole)
            else:
                self.total_units = self.size(whole)
                size = self.total_units if whole is output else self.size(output)
                self.cap = min(self.budget, size)
                self.notice_unit = self.unit
        else:
            self.cap = self.budget
            if self.unit == SizeUnit.BYTES:
                self.cap = min(self.budget, max(source.total_bytes, 0))
            # Only the byte size of the whole output is known here.
            self.notice_unit = SizeUnit.BYTES
            self.total_lines = max(source.total_lines, 0)
            self.total_units = max(source.total_bytes, 0)

    def _whole_bytes(self, whole: str) -> int:
        """Return the cleaned whole text's UTF-8 size (known if cleaning kept it)."""
        if self.uncleaned and self.text.size_bytes is not None:
            return self.text.size_bytes
        return self.policy.measure(whole, SizeUnit.BYTES)

    def size(self, text: str) -> int:
        """Measure in the tool's unit."""
        if self.unit == SizeUnit.BYTES and text is self.text.head and self.text.whole:
            return self._whole_bytes(text)
        return self.policy.measure(text, self.unit)

    def _tokens_up_to_budget(self, whole: str) -> int:
        """Count tokens, stopping early once a prefix is over the budget."""
        # Token counts are monotone under prefixes, so an over-budget prefix
        # proves the whole is over too; most spilled outputs stop here.
        probe = whole[: 8 * self.budget + 64]
        count = self.size(probe)
        if count > self.budget or len(probe) == len(whole):
            return count
        return self.size(whole)

    def shape(self, room: int) -> _Shape:
        """Cut head and tail into `room` units, head first by the ratio."""
        policy, text, unit = self.policy, self.text, self.unit
        share = policy.head_ratio / (policy.head_ratio + policy.tail_ratio)
        head_end = _prefix_end(text.head, int(room * share), unit, policy)
        head_end = _head_cut(text.head, head_end)
        head = text.head[:head_end]
        low = head_end if text.whole else 0
        tail_room = room - self.size(head)
        start = _suffix_start(text.tail, tail_room, unit, policy, low)
        start = _tail_cut(text.tail, start)
        tail = text.tail[start:]
        covered = head.count("\n")
        if head_end < len(text.head) and text.head[head_end] == "\n":
            covered += 1  # the line is shown whole; only its newline is not
        elif text.whole and head_end == len(text.head) and not head.endswith("\n"):
            covered += 1  # the whole text is in the head: its last line too
        if text.whole:
            if self.text.line_count is None:
                before = text.head.count("\n", 0, start)
            else:  # the tail is short, the text may be huge
                newlines = self.total_lines - int(not self.ends_with_newline)
                before = newlines - tail.count("\n")
            at_line_start = start == 0 or text.tail[start - 1] == "\n"
        else:
            ends = self.ends_with_newline
            total_newlines = max(self.total_lines - (0 if ends else 1), 0)
            before = total_newlines - tail.count("\n")
            at_line_start = start > 0 and text.tail[start - 1] == "\n"
        first = before + 1 if at_line_start else before + 2
        return _Shape(head, tail, covered, max(first, covered + 1), start)

    def candidates(self, shape: _Shape) -> tuple[KeyLine, ...]:
        """Return key-line candidates outside what `shape` shows."""
        if self.policy.max_key_lines == 0:
            return ()
        found = self.text.key_lines
        if self.text.whole and not self._scanned_covers(shape):
            whole, end = self.text.head, shape.tail_index
            start = whole.rfind("\n", 0, len(shape.head)) + 1
            first = shape.head.count("\n") + 1
            if first == shape.covered_head:
                # The head shows that line whole but for its newline: skip it,
                # so the scan's first 2k are all from the omitted part.
                start, first = len(shape.head) + 1, first + 1
            if end > 0 and whole[end - 1] != "\n":
                # The tail starts mid-line: judge that line on its own start.
                newline = whole.find("\n", end)
                end = len(whole) if newline < 0 else newline
            found = scan_region(whole, start, end, first, self.policy)
        inside = [
            (n, line) for n, line in found if shape.covered_head < n < shape.tail_first
        ]
        # The first and last 2k of the omitted part: what a store pass and a
        # rescan both hold, so a preview never depends on which one ran.
        cap = kept_per_end(self.policy.max_key_lines)
        if len(inside) > 2 * cap:
            inside = sorted(dict(inside).items())
            inside = inside[:cap] + inside[-cap:]
        group_lines, _ = self.groups()
        inside += [
            (n, line)
            for n, line in group_lines
            if shape.covered_head < n < shape.tail_first
        ]
        return tuple(sorted(dict(inside).items()))

    def groups(self) -> tuple[tuple[KeyLine, ...], Mapping[str, int] | None]:
        """Return the first lines of each group and the groups' counts, if known."""
        text = self.text
        if text.group_counts is not None and (not text.whole or self.uncleaned):
            return text.group_lines, text.group_counts
        if not text.whole or self.policy.max_key_lines == 0:
            return (), None
        scan = self.whole_scan()
        return scan.group_lines, scan.group_counts

    def whole_scan(self) -> KeyLineScan:
        """Scan the whole (cleaned) text once: group tallies and facts."""
        if self._whole_scan is None:
            self._whole_scan = scan_text(self.text.head, self.policy)
        return self._whole_scan

    def counts(self) -> tuple[tuple[str, int], ...]:
        """Return what the facts line counts: as given, or found in a whole text."""
        text = self.text
        told = bool(text.counts) or text.group_counts is not None
        if not text.whole or (self.uncleaned and told):
            return text.counts
        # Counted on the text as a terminal shows it, as key lines are judged.
        return self.whole_scan().facts.shown()

    def head_has_key_line(self, shape: _Shape) -> bool:
        """Tell whether the head of `shape` shows a key line (if not: boilerplate)."""
        whole_lines = shape.head.split("\n")
        shown_start = whole_lines.pop()  # a line the head shows only the start of
        if shape.covered_head > len(whole_lines):
            whole_lines.append(shown_start)  # the whole text, its last line whole
            shown_start = ""
        if self.text.key_line_edge is not None or not self.text.whole:
            # A store pass kept every candidate near the start: ask those.
            told = any(n <= len(whole_lines) for n, _ in self.text.key_lines)
        else:
            told = any(map(self._is_key_line, whole_lines))
        return told or (bool(shown_start) and self._is_key_line(shown_start))

    def _is_key_line(self, line: str) -> bool:
        """Judge a line as the store pass does: on its start (see `KeyLineScanner`)."""
        return bool(self.policy.judge_key_line(line[: KEY_LINE_SCAN_CHARS + 1]))

    def _scanned_covers(self, shape: _Shape) -> bool:
        """Tell whether the given key lines hold every candidate `shape` may show."""
        text = self.text
        if text.key_line_edge is None:
            return bool(text.key_lines)
        # The edge is in bytes of the output; a cleaned text's cuts are not.
        edge = text.key_line_edge
        return (
            self.uncleaned
            and _utf8_size(shape.head) <= edge
            and _utf8_size(shape.tail) <= edge
        )

    def assemble(self, shape: _Shape, key_lines: Iterable[KeyLine | Collapsed]) -> str:
        """Put the parts together, with the notice for this shape."""
        omitted_lines = shape.tail_first - shape.covered_head - 1
        shown = self.policy.measure(shape.head + shape.tail, self.notice_unit)
        omitted = self.total_units - shown  # chars and bytes add up
        omitted = min(max(omitted, 0), self.total_units)
        notice = render_notice(
            self.source,
            omitted_lines,
            omitted,
            self.notice_unit,
            first_line=shape.covered_head + 1,
        )
        return (
            render_header(self.source)
            + shape.head
            + "\n"
            + notice
            + render_key_lines(key_lines, self.source.handle)
            + shape.tail
        )


def build_preview(text: PreviewText, source: PreviewSource, policy: SpillPolicy) -> str:
    """Return the replacement for a spilled output, within the tool's budget."""
    source = dataclasses.replace(source, counts=(), listing=None)
    build = _Builder(text, source, policy)
    # Every count shown is at most its total (a line span only appears when some
    # line is left out, so its ends are at most the line count).
    lines = _nines(build.total_lines)
    widest = widest_notice(source, lines, _nines(build.total_units), build.notice_unit)
    fixed = build.size(render_header(source) + "\n" + widest)
    room = build.cap - fixed
    if room < 0:
        msg = (
            f"header and notice need {fixed} {build.unit}, more than the "
            f"{build.cap} {build.unit} available for {source.tool_name!r}"
        )
        raise ValueError(msg)
    # The facts line and a listing's summary are shown when they cost at most
    # an eighth of the room.
    listing = text.listing
    if listing is None and text.whole:
        listing = listing_summary(build.text.head)
    told = dataclasses.replace(source, counts=build.counts(), listing=listing)
    if told != source:
        cost = build.size(render_header(told)) - build.size(render_header(source))
        if cost <= room // 8:
            build.source, source, room = told, told, room - cost
    # Key lines come from what the widest cut leaves out, so any narrower cut
    # leaves them out too. They get up to a third of the room, half when the
    # head shows no key line (a banner, a collection list: boilerplate).
    shape = build.shape(room)
    pool = build.candidates(shape)
    share = room // 3 if build.head_has_key_line(shape) else room // 2
    chosen = _choose(build, pool, share, shape)
    if chosen:
        room -= build.size(render_key_lines(chosen, source.handle))
        shape = build.shape(room)
    for attempt in range(_ROUNDS):
        kept = [
            c for c in chosen if shape.covered_head < _line_of(c) < shape.tail_first
        ]
        replacement = build.assemble(shape, kept)
        over = build.size(replacement) - build.cap
        if over <= 0:
            return replacement
        # Only token counts (which do not add up across joins) get here.
        if chosen:
            room += build.size(render_key_lines(chosen, source.handle))
            chosen = []
        elif room > 0:
            # Shrink by the excess, and geometrically if that keeps missing.
            room = max(0, min(room - over, room * 7 // 8 if attempt > 8 else room))
        else:
            break
        shape = build.shape(room)
    msg = f"no preview fits {build.cap} {build.unit} for {source.tool_name!r}"
    raise ValueError(msg)


def _line_of(entry: KeyLine | Collapsed) -> int:
    """Return the artifact line an entry of the key-line block stands at."""
    return entry.like_line if isinstance(entry, Collapsed) else entry[0]


def _choose(
    build: _Builder, pool: tuple[KeyLine, ...], share: int, shape: _Shape
) -> list[KeyLine | Collapsed]:
    """Plan the key-line block with the most lines whose size fits `share`."""
    if not pool:
        return []
    policy = build.policy
    handle = build.source.handle
    _, totals = build.groups()
    capped = len(pool) >= 2 * kept_per_end(policy.max_key_lines)

    @cache
    def shown() -> frozenset[str]:
        # A group the ends already show lines of needs no more in the block.
        ends = (shape.head + shape.tail).splitlines()
        return frozenset(group_key(line) for line in ends)

    kinds = {text: policy.recognize(text) for _, text in pool}

    def rank(text: str) -> int:
        # Warnings and locations last; what no rule knows before them.
        recognition = kinds[text]
        if recognition is None:
            return 1
        return 0 if recognition.kind in _MINOR_KINDS else 2

    def attached(text: str) -> bool:
        recognition = kinds[text]
        return recognition is not None and recognition.kind == "location"

    def plan(slots: int) -> list[KeyLine | Collapsed] | None:
        chosen = plan_key_lines(
            pool,
            slots,
            rank,
            capped=capped,
            totals=totals,
            attached=attached,
            shown=shown,
        )
        fits = build.size(render_key_lines(chosen, handle)) <= share
        return chosen if fits else None

    # Most often every slot fits at once; otherwise fewer, one at a time.
    for slots in range(policy.max_key_lines, 0, -1):
        chosen = plan(slots)
        if chosen is not None:
            return chosen
    return []


def build_whole(text: str, source: PreviewSource) -> str:
    """Return the whole output, cleaned, under its header; the notice omits nothing."""
    notice = render_notice(source, 0, 0, SizeUnit.BYTES)
    return render_header(source) + clean_terminal(text) + "\n" + notice


def build_pointer(source: PreviewSource, body: str = "") -> str:
    """Return the header, `body` in place of the output, and a notice omitting all."""
    notice = render_notice(
        source, source.total_lines, source.total_bytes, SizeUnit.BYTES, first_line=1
    )
    return render_header(source) + body + "\n" + notice
