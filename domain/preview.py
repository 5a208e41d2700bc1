"""The spill replacement: header, head, notice, key lines, tail (S1.4, S1.6)."""

# Layout (every part but head and tail is rendered here):
#
#     [tool result stored as <source id>; tool: <name>; sha256: <hex>[; ...]]
#     [summary: <summary>]
#     <head: a prefix of the output>
#     [... <n> <unit> omitted, <m> lines (lines a-b); full output: <handle>; <hint>]
#     [key lines from the omitted part: <k>]      (only when there are some)
#     line <N>: <text>                             (k such lines)
#     <tail: a suffix of the output>
#
# A newline always separates head and notice, so the layout parses back
# unambiguously. <unit> is chars for a chars budget and bytes otherwise (the
# omitted tokens would cost a second full count). Identifiers (source id, tool,
# sha256, tool_use_id, handle, hint) are shown verbatim except that control and
# line-separator characters become backslash escapes, so nothing can break the
# layout; the summary's become spaces.

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from .key_lines import KeyLine, scan_region
from .policy import SizeUnit
from .summary import SUMMARY_LIMIT

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .policy import SpillPolicy

KEY_LINE_SHOWN_CHARS: Final = 200
MAX_DIGITS: Final = 20  # any count below 2**64
SESSION_NAME_MAX: Final = 255  # NAME_MAX: the session id is one path component
LINE_END_WINDOW: Final = 1024  # how far a cut may move to land on a line end
CLUSTER_BACKOFF: Final = 32  # how far a cut may move to leave a combining sequence
_ROUNDS: Final = 64

_ZWJ: Final = "\u200d"
_BREAKING: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class PreviewSource:
    """What the header and notice say about the stored artifact."""

    source_id: str
    summary: str
    tool_name: str
    content_sha256: str
    handle: str
    hint: str
    # Lines: the number of "\n" plus one when the output is non-empty and does
    # not end with "\n" (used to number the tail when only windows are given).
    total_lines: int
    total_bytes: int
    tool_use_id: str | None = None
    is_error: bool = False
    partial: bool = False


@dataclass(frozen=True)
class PreviewText:
    """The output to preview: whole, or a head window and a tail window of it."""

    head: str
    tail: str
    whole: bool
    key_lines: tuple[KeyLine, ...] = ()


def _escape(text: str) -> str:
    """Show an identifier on one line, faithfully (control characters escaped)."""
    return _BREAKING.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}",
        text,
    )


def render_header(source: PreviewSource) -> str:
    """Return the provenance header: two lines, each ending in a newline."""
    parts = [
        f"[tool result stored as {_escape(source.source_id)}",
        f"tool: {_escape(source.tool_name)}",
        f"sha256: {_escape(source.content_sha256)}",
    ]
    if source.tool_use_id is not None:
        parts.append(f"tool_use_id: {_escape(source.tool_use_id)}")
    if source.is_error:
        parts.append("is_error: true")
    if source.partial:
        parts.append("partial: the stored output is incomplete")
    # The worst case assumes at most SUMMARY_LIMIT characters; hold to it.
    summary = _BREAKING.sub(" ", _clip(source.summary, SUMMARY_LIMIT))
    return "; ".join(parts) + f"]\n[summary: {summary}]\n"


def render_notice(
    source: PreviewSource,
    omitted_lines: int,
    omitted_units: int,
    unit: SizeUnit,
    *,
    first_line: int | None = None,
) -> str:
    """Return the one notice line (ending in a newline): what is omitted, where."""
    span = None
    if first_line is not None and omitted_lines > 0:
        span = (first_line, first_line + omitted_lines - 1)
    return _notice(source, omitted_lines, omitted_units, unit, span)


def _notice(
    source: PreviewSource,
    omitted_lines: int,
    omitted_units: int,
    unit: SizeUnit,
    span: tuple[int, int] | None,
) -> str:
    """Render the notice; the line span is separate so its widest can be priced."""
    where = "" if span is None else f" (lines {span[0]}-{span[1]})"
    return (
        f"[... {omitted_units} {unit} omitted, {omitted_lines} lines{where}; "
        f"full output: {_escape(source.handle)}; {_escape(source.hint)}]\n"
    )


def render_key_lines(key_lines: Iterable[KeyLine]) -> str:
    """Return the key-line block ("" when there are none)."""
    shown = [f"line {number}: {_show_line(text)}\n" for number, text in key_lines]
    if not shown:
        return ""
    return f"[key lines from the omitted part: {len(shown)}]\n" + "".join(shown)


def _show_line(text: str) -> str:
    """Clip a key line for display; it must stay one line."""
    text = text.removesuffix("\r").replace("\n", " ")
    if len(text) <= KEY_LINE_SHOWN_CHARS:
        return text
    return text[: _back_off_cluster(text, KEY_LINE_SHOWN_CHARS)] + "..."


def _clip(text: str, limit: int) -> str:
    """Return at most `limit` characters of `text`, never half a surrogate pair."""
    if len(text) <= limit:
        return text
    return text[: _back_off_cluster(text, limit)]


def _fill(fill: str, size_bytes: int) -> str:
    """Return a string of exactly `size_bytes` UTF-8 bytes made mostly of `fill`."""
    width = len(fill.encode("utf-8", "surrogatepass"))
    count = size_bytes // width
    return fill * count + "!" * (size_bytes - count * width)


def worst_fixed_size(  # noqa: PLR0913 - the call's facts, all keyword-only
    policy: SpillPolicy,
    tool_name: str,
    unit: SizeUnit,
    *,
    tool_use_id: str | None = None,
    is_error: bool = False,
    session_id: str | None = None,
) -> int:
    """Return the largest header + separator + notice a call can need, in `unit`."""
    # Handles and hints are bounded in rendered UTF-8 bytes, the summary in
    # characters, every count by MAX_DIGITS digits; without a session id its name
    # may take NAME_MAX bytes. Fills that maximise characters ("!") and bytes
    # (astral) make it exact for chars and bytes; for tokens it is the largest
    # count over a few fills (exact for the default counter, where "!" is worst).
    fills = ["!", "\U0001f600"]
    if unit == SizeUnit.TOKENS:
        fills += ["a", "0", " ", "\u5b57", "\u0301", "\u00e9"]
    nines = int("9" * MAX_DIGITS)
    hexish = "0a" * 32  # a digest whose every character is a token of its own
    worst = 0
    for fill in fills:
        session = (
            session_id if session_id is not None else _fill(fill, SESSION_NAME_MAX)
        )
        source = PreviewSource(
            source_id=f"artifact:{session}:tool_result_{nines}.txt:{hexish[:12]}",
            summary=fill * SUMMARY_LIMIT,
            tool_name=tool_name,
            content_sha256=hexish,
            handle=_fill(fill, policy.max_handle_length),
            hint=_fill(fill, policy.max_hint_length),
            total_lines=nines,
            total_bytes=nines,
            tool_use_id=tool_use_id,
            is_error=is_error,
            partial=True,
        )
        header = render_header(source)
        for notice_unit in {unit, SizeUnit.BYTES}:
            notice = _notice(source, nines, nines, notice_unit, (nines, nines))
            worst = max(worst, policy.measure(header + "\n" + notice, unit))
    return worst


def fixed_parts_fit(
    policy: SpillPolicy,
    tool_name: str,
    *,
    tool_use_id: str | None = None,
    is_error: bool = False,
    session_id: str | None = None,
) -> bool:
    """Tell whether the worst-case header and notice fit the tool's budget (S1.2.4)."""
    limit = policy.limit_for(tool_name)
    worst = worst_fixed_size(
        policy,
        tool_name,
        limit.unit,
        tool_use_id=tool_use_id,
        is_error=is_error,
        session_id=session_id,
    )
    return worst <= limit.budget


def _select(candidates: Iterable[KeyLine], count: int) -> list[KeyLine]:
    """Pick up to `count` lines: the earlier half first, then the latest ones."""
    ordered = sorted(dict(candidates).items())
    if len(ordered) <= count:
        return ordered
    late = count // 2
    return ordered[: count - late] + (ordered[-late:] if late else [])


# ---------------------------------------------------------------- cutting


def _inside_cluster(text: str, index: int) -> bool:
    """Tell whether cutting before text[index] would split what belongs together."""
    if index <= 0 or index >= len(text):
        return False
    before, char = text[index - 1], text[index]
    if "\udc00" <= char <= "\udfff" and "\ud800" <= before <= "\udbff":
        return True
    if before == "\r" and char == "\n":
        return True
    if _ZWJ in (before, char) or "\U0001f3fb" <= char <= "\U0001f3ff":
        return True
    return unicodedata.category(char).startswith("M")


def _splits_pair(text: str, index: int) -> bool:
    """Tell whether a cut before text[index] splits a surrogate pair."""
    return (
        0 < index < len(text)
        and "\ud800" <= text[index - 1] <= "\udbff"
        and "\udc00" <= text[index] <= "\udfff"
    )


def _back_off_cluster(text: str, index: int) -> int:
    """Move a cut backwards off a grapheme-like cluster, a little at most."""
    cut = index
    for _ in range(CLUSTER_BACKOFF):
        if not _inside_cluster(text, cut):
            return cut
        cut -= 1
    return index - 1 if _splits_pair(text, index) else index


def _forward_off_cluster(text: str, index: int) -> int:
    """Move a cut forwards off a grapheme-like cluster, a little at most."""
    cut = index
    for _ in range(CLUSTER_BACKOFF):
        if not _inside_cluster(text, cut):
            return cut
        cut += 1
    return index + 1 if _splits_pair(text, index) else index


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
    if index < len(text) and text[index] == "\n" and text[index - 1] != "\r":
        return index  # the line is whole already; only its newline is left out
    newline = text.rfind("\n", index - min(LINE_END_WINDOW, index // 4), index)
    if newline >= 0:
        return newline + 1
    return _back_off_cluster(text, index)


def _tail_cut(text: str, index: int, low: int) -> int:
    """Move a tail cut forward to a nearby line start, else off a cluster."""
    end = len(text)
    if index >= end:
        return end
    if index > low and text[index - 1] == "\n":
        return index
    window = min(LINE_END_WINDOW, (end - index) // 4)
    newline = text.find("\n", index, index + window)
    if 0 <= newline < end - 1:  # keep a non-empty tail
        return newline + 1
    return _forward_off_cluster(text, index)


# ---------------------------------------------------------------- building


def _nines(value: int) -> int:
    """Return the widest number with as many digits as `value`."""
    return int("9" * len(str(max(value, 0))))


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
        self.text, self.source, self.policy = text, source, policy
        self.unit, self.budget = limit.unit, limit.budget
        if text.whole:
            if text.head != text.tail:
                msg = "a whole PreviewText needs head == tail == the output"
                raise ValueError(msg)
            whole = text.head
            self.total_lines = whole.count("\n") + int(not whole.endswith("\n"))
            if self.unit == SizeUnit.TOKENS:
                self.cap = min(self.budget, self._tokens_up_to_budget(whole))
                # Counting the omitted middle would cost another full count.
                self.notice_unit = SizeUnit.BYTES
                self.total_units = policy.measure(whole, SizeUnit.BYTES)
            else:
                self.total_units = self.size(whole)
                self.cap = min(self.budget, self.total_units)
                self.notice_unit = self.unit
        else:
            self.cap = self.budget
            if self.unit == SizeUnit.BYTES:
                self.cap = min(self.budget, max(source.total_bytes, 0))
            # Only the byte size of the whole output is known here.
            self.notice_unit = SizeUnit.BYTES
            self.total_lines = max(source.total_lines, 0)
            self.total_units = max(source.total_bytes, 0)

    def _tokens_up_to_budget(self, whole: str) -> int:
        """Count tokens, stopping early once a prefix is over the budget."""
        # Token counts are monotone under prefixes, so an over-budget prefix
        # proves the whole is over too; most spilled outputs stop here.
        probe = whole[: 8 * self.budget + 64]
        count = self.size(probe)
        if count > self.budget or len(probe) == len(whole):
            return count
        return self.size(whole)

    def size(self, text: str) -> int:
        """Measure in the tool's unit."""
        return self.policy.measure(text, self.unit)

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
        start = _tail_cut(text.tail, start, low)
        tail = text.tail[start:]
        covered = head.count("\n")
        if head_end < len(text.head) and text.head[head_end] == "\n":
            covered += 1  # the line is shown whole; only its newline is not
        if text.whole:
            before = text.head.count("\n", 0, start)
            at_line_start = start == 0 or text.tail[start - 1] == "\n"
        else:
            ends = text.tail.endswith("\n")
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
        if not found and self.text.whole:
            whole, end = self.text.head, shape.tail_index
            start = whole.rfind("\n", 0, len(shape.head)) + 1
            first = shape.head.count("\n") + 1
            if end > 0 and whole[end - 1] != "\n":
                # The tail starts mid-line: judge that line on its own start.
                newline = whole.find("\n", end)
                end = len(whole) if newline < 0 else newline
            found = scan_region(whole, start, end, first, self.policy)
        return tuple(
            (n, line) for n, line in found if shape.covered_head < n < shape.tail_first
        )

    def assemble(self, shape: _Shape, key_lines: Iterable[KeyLine]) -> str:
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
            + render_key_lines(key_lines)
            + shape.tail
        )


def build_preview(text: PreviewText, source: PreviewSource, policy: SpillPolicy) -> str:
    """Return the replacement for a spilled output, within the tool's budget."""
    build = _Builder(text, source, policy)
    # Every count shown is at most its total (a line span only appears when some
    # line is left out, so its ends are at most the line count).
    lines = _nines(build.total_lines)
    widest = _notice(
        source, lines, _nines(build.total_units), build.notice_unit, (lines, lines)
    )
    fixed = build.size(render_header(source) + "\n" + widest)
    room = build.cap - fixed
    if room < 0:
        msg = (
            f"header and notice need {fixed} {build.unit}, more than the "
            f"{build.cap} {build.unit} available for {source.tool_name!r}"
        )
        raise ValueError(msg)
    # Key lines come from what the widest cut leaves out, so any narrower cut
    # leaves them out too; they get at most a quarter of the room.
    shape = build.shape(room)
    chosen = _select(build.candidates(shape), policy.max_key_lines)
    while chosen and build.size(render_key_lines(chosen)) > room // 4:
        chosen.pop()
    if chosen:
        room -= build.size(render_key_lines(chosen))
        shape = build.shape(room)
    for attempt in range(_ROUNDS):
        kept = [c for c in chosen if shape.covered_head < c[0] < shape.tail_first]
        replacement = build.assemble(shape, kept)
        over = build.size(replacement) - build.cap
        if over <= 0:
            return replacement
        # Only token counts (which do not add up across joins) get here.
        if chosen:
            room += build.size(render_key_lines(chosen))
            chosen = []
        elif room > 0:
            # Shrink by the excess, and geometrically if that keeps missing.
            room = max(0, min(room - over, room * 7 // 8 if attempt > 8 else room))
        else:
            break
        shape = build.shape(room)
    msg = f"no preview fits {build.cap} {build.unit} for {source.tool_name!r}"
    raise ValueError(msg)
