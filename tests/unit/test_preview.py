"""The spill replacement: budget, prefix/suffix, no overlap, key lines (S1.4, S1.6)."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from spillvault.domain.enums import SizeUnit
from spillvault.domain.graphemes import CLUSTER_BACKOFF
from spillvault.domain.key_line_groups import kept_per_end
from spillvault.domain.key_lines import (
    KEY_LINE_SCAN_BYTES,
    KEY_LINE_SCAN_CHARS,
    KeyLineScanner,
    scan_key_lines,
)
from spillvault.domain.notice import (
    PreviewSource,
    _escape,
    fixed_parts_fit,
    render_header,
    render_notice,
    worst_fixed_size,
)
from spillvault.domain.policy import SpillPolicy, ToolLimit
from spillvault.domain.preview import (
    PreviewText,
    build_pointer,
    build_preview,
    build_whole,
)
from spillvault.domain.terminal import clean_terminal

from support.views import FACTS_LINE, LISTING_LINE

HANDLE = "s-7kq2m9x4ab3cd/1\u2042"  # the mark makes it unique
HINT = "spillvault read s-7kq2m9x4ab3cd/1"
_CALL = re.escape(f'handle="{HANDLE}"')
NOTICE = re.compile(
    r"\n\[\.\.\. (\d+) (chars|bytes|tokens) omitted, (\d+) lines"
    r"(?: \(lines (\d+)-(\d+)\))?; full output: "
    + re.escape(HANDLE)
    + rf"; read: read_artifact\({_CALL}, start_line=\d+, limit=\d+\); "
    + rf'search: grep_artifact\({_CALL}, pattern="\.\.\."\); shell: '
    + re.escape(HINT)
    + r"\]\n"
)
_SURROGATES = re.compile("[\ud800-\udfff]")
KEY_BLOCK = re.compile(r"\[key lines from the omitted part: (\d+)\]\n")


def line_count(text: str) -> int:
    return text.count("\n") + (not text.endswith("\n"))


def source_for(text: str, tool: str = "t", **changes: object) -> PreviewSource:
    data = text.encode("utf-8", "surrogatepass")
    source = PreviewSource(
        source_id="artifact:sess:tool_result_001.txt:0123456789ab",
        summary=f"first line ({line_count(text)} lines, {len(data)} bytes)",
        tool_name=tool,
        content_sha256=hashlib.sha256(data).hexdigest(),
        handle=HANDLE,
        hint=HINT,
        total_lines=line_count(text),
        total_bytes=len(data),
    )
    return replace(source, **changes)  # type: ignore[arg-type]


def small_policy(unit: SizeUnit, limit: int | None = None, **kw: object) -> SpillPolicy:
    """A policy with short handles, so small budgets are valid."""
    base = SpillPolicy(max_handle_length=64, max_hint_length=100, **kw)  # type: ignore[arg-type]
    worst = worst_fixed_size(base, "t", unit, is_error=True)
    return replace(
        base, tool_limits={"t": ToolLimit(worst if limit is None else limit, unit)}
    )


@dataclass
class Parsed:
    head: str
    tail: str
    omitted_units: int
    unit: str
    omitted_lines: int
    first_line: int | None
    key_lines: list[tuple[int, str]]
    notes: list[tuple[int, int]] = field(default_factory=list)  # (like line, more)


NOTE = re.compile(
    r"\[\.\.\. (?:at least )?(\d+) more like line (\d+): grep_artifact\(.*\)\]"
)


def parse(out: str, source: PreviewSource) -> Parsed:
    """Read head, notice, key lines and tail back out of a replacement."""
    header = render_header(source)
    first, rest = out.split("\n", 1)
    while FACTS_LINE.match(rest) or LISTING_LINE.match(rest):
        rest = rest.split("\n", 1)[1]  # the header's optional lines (S1.6)
    out = first + "\n" + rest
    assert out.startswith(header)
    rest = out[len(header) :]
    notice = NOTICE.search(rest)
    assert notice is not None, rest[:300]
    head, after = rest[: notice.start()], rest[notice.end() :]
    keys: list[tuple[int, str]] = []
    notes: list[tuple[int, int]] = []
    block = KEY_BLOCK.match(after)
    if block:
        after = after[block.end() :]
        for _ in range(int(block[1])):
            line, _, after = after.partition("\n")
            note = NOTE.fullmatch(line)
            if note is not None:
                notes.append((int(note[2]), int(note[1])))
                continue
            found = re.fullmatch(r"line (\d+): (.*)", line, re.DOTALL)
            assert found is not None
            keys.append((int(found[1]), found[2]))
    first = int(notice[4]) if notice[4] else None
    if first is not None:
        assert int(notice[5]) == first + int(notice[3]) - 1
    return Parsed(
        head, after, int(notice[1]), notice[2], int(notice[3]), first, keys, notes
    )


def spans(text: str, output: str | None = None) -> list[tuple[int, int]]:
    """(start, end) of each line's content; no line after a final newline.

    `text` may be the cleaned `output`: same newlines, but a last line that
    cleaning emptied is still a line.
    """
    result, start = [], 0
    for piece in text.split("\n"):
        result.append((start, start + len(piece)))
        start += len(piece) + 1
    output = text if output is None else output
    if output.endswith("\n") or not output:
        result.pop()
    return result


def omitted_line_numbers(
    text: str,
    head_end: int,
    tail_start: int,
    *,
    head_known: bool,
    tail_known: bool,
    output: str | None = None,
) -> list[int]:
    """1-based lines not shown whole in head or tail (the reference model)."""
    hidden = []
    for number, (start, end) in enumerate(spans(text, output), start=1):
        in_head = end < head_end or (end == head_end and head_known)
        in_tail = start > tail_start or (start == tail_start and tail_known)
        if not (in_head or in_tail):
            hidden.append(number)
    return hidden


def inside_cluster(text: str, i: int) -> bool:
    if i <= 0 or i >= len(text):
        return False
    before, char = text[i - 1], text[i]
    if before == "\n":
        # A line end breaks every cluster; cleaning can start a line with a
        # combining mark that followed an escape sequence.
        return False
    return (
        (before == "\r" and char == "\n")
        or "\u200d" in (before, char)
        or "\U0001f3fb" <= char <= "\U0001f3ff"
        or unicodedata.category(char).startswith("M")
        or ("\ud800" <= before <= "\udbff" and "\udc00" <= char <= "\udfff")
    )


def assert_good_cut(text: str, i: int, step: int) -> None:
    """A cut is off clusters unless a long run made backing off give up."""
    if inside_cluster(text, i):
        assert all(inside_cluster(text, i + step * k) for k in range(CLUSTER_BACKOFF))


def check_whole(
    out: str, text: str, policy: SpillPolicy, source: PreviewSource
) -> Parsed:
    """Every S1.4 promise for a preview of a whole text, shown as a terminal would."""
    limit = policy.limit_for(source.tool_name)
    unit = limit.unit
    size = policy.measure(out, unit)
    assert size <= limit.budget
    assert size <= policy.measure(text, unit)
    got = parse(out, source)
    screen = clean_terminal(text)
    assert screen.startswith(got.head)
    assert screen.endswith(got.tail)
    tail_start = len(screen) - len(got.tail)
    assert len(got.head) <= tail_start  # no overlap
    if unit != SizeUnit.TOKENS and screen == text:
        # Only what cleaning saved can make room for the whole text.
        assert len(got.head) < tail_start  # something is left out
    assert_good_cut(screen, len(got.head), -1)
    assert_good_cut(screen, tail_start, +1)
    notice_unit = SizeUnit.BYTES if unit == SizeUnit.TOKENS else unit
    assert got.unit == notice_unit
    middle = screen[len(got.head) : tail_start]
    assert got.omitted_units == policy.measure(middle, notice_unit)
    hidden = omitted_line_numbers(
        screen,
        len(got.head),
        tail_start,
        head_known=True,
        tail_known=True,
        output=text,
    )
    assert got.omitted_lines == len(hidden)
    if hidden:
        assert got.first_line == hidden[0]
        assert hidden == list(range(hidden[0], hidden[-1] + 1))
    lines = screen.split("\n")
    assert len(got.key_lines) <= policy.max_key_lines
    assert [n for n, _ in got.key_lines] == sorted({n for n, _ in got.key_lines})
    for number, shown in got.key_lines:
        assert number in hidden
        original = lines[number - 1][:KEY_LINE_SCAN_CHARS]
        assert policy.is_key_line(original)
        assert original.startswith(shown.removesuffix("..."))
    return got


# ---------------------------------------------------------------- strategies

SPECIALS = [
    "字",
    "漢字テキスト",
    "😀",
    "👍🏽",
    "👩\u200d💻",
    "e\u0301",
    "a\u0301\u0302",
    "\r\n",
    "\n",
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\t",
    " ",
    "error: boom",
    "Traceback (most recent call last):",
    "\ud83d\ude00",  # an emoji as a surrogate pair (two code points)
    "\udc80",  # a lone surrogate, as surrogateescape leaves them
    # terminal noise, which previews clean away line for line
    "\x1b[1;31m",
    "\x1b[0m",
    "\x1b]8;;file:///x\x07",
    "\x1b[2K\r",
    " 50%\r",
    "\r",
    "\x1b",
    "\x1b[31mERROR\x1b[0m: boom",
]
pieces = st.one_of(
    st.text(max_size=30),
    st.sampled_from(SPECIALS),
    st.tuples(
        st.sampled_from([*SPECIALS, "ab ", "line of text\n", "0123456789", "x"]),
        st.integers(min_value=1, max_value=200),
    ).map(lambda t: t[0] * t[1]),
)
big_pieces = st.tuples(
    st.sampled_from([*SPECIALS, "ab ", "line of text\n", "0123456789", "word"]),
    st.integers(min_value=300, max_value=3000),
).map(lambda t: t[0] * t[1])


def insert_at(parts: tuple[list[str], str, int]) -> str:
    pieces_, big, where = parts
    at = where % (len(pieces_) + 1)
    return "".join([*pieces_[:at], big, *pieces_[at:]])


texts = st.one_of(
    st.tuples(st.lists(pieces, max_size=20), big_pieces, st.integers()).map(insert_at),
    st.lists(pieces, min_size=1, max_size=25).map("".join),
)
units = st.sampled_from(list(SizeUnit))
SMALL = {unit: small_policy(unit) for unit in SizeUnit}


@settings(max_examples=150)
@given(text=texts, unit=units, data=st.data())
def test_whole_previews_keep_every_promise(
    text: str, unit: SizeUnit, data: st.DataObject
) -> None:
    worst = SMALL[unit].limit_for("t").limit
    size = SMALL[unit].measure(text, unit)
    limit = data.draw(st.integers(min_value=worst, max_value=max(worst, size - 1)))
    ratio = data.draw(st.sampled_from([(1, 4), (1, 1), (3, 1), (0.5, 7)]))
    policy = replace(
        SMALL[unit],
        tool_limits={"t": ToolLimit(limit, unit)},
        head_ratio=ratio[0],
        tail_ratio=ratio[1],
    )
    source = source_for(text)
    try:
        out = build_preview(PreviewText(text, text, whole=True), source, policy)
    except ValueError:
        assert size < worst  # the gate never spills a text under its limit
        return
    check_whole(out, text, policy, source)


# Long logs with key lines all along: a block of lines repeated.
key_line_logs = st.tuples(
    st.lists(
        st.sampled_from(
            ["ok", "ERROR: upstream 502", "FAILED test_x", "row", "", "Traceback"]
        ),
        min_size=2,
        max_size=20,
    ),
    st.integers(300, 1500),
).map(lambda block: "\n".join(block[0] * block[1]))


@settings(max_examples=100, deadline=None)
@given(
    text=st.one_of(key_line_logs, key_line_logs, texts),
    unit=units,
    max_key_lines=st.integers(1, 4),
    piece=st.one_of(st.integers(1, 300), st.sampled_from([4096, 1 << 20])),
    data=st.data(),
)
def test_a_whole_preview_from_the_store_pass_equals_one_that_scans_again(
    text: str, unit: SizeUnit, max_key_lines: int, piece: int, data: st.DataObject
) -> None:
    """Key lines, line count and size scanned as the text was stored change nothing."""
    worst = SMALL[unit].limit_for("t").limit
    size = SMALL[unit].measure(text, unit)
    # Small budgets against long texts: the ends' edges leave a middle.
    highest = max(worst, min(size - 1, 3 * worst))
    limit = data.draw(st.integers(min_value=worst, max_value=highest))
    policy = replace(
        SMALL[unit],
        tool_limits={"t": ToolLimit(limit, unit)},
        max_key_lines=max_key_lines,
    )
    # As the gate stores a str: one with a lone surrogate fails to store.
    assume(not _SURROGATES.search(text))
    stored = text.encode("utf-8")
    budget = policy.limit_for("t").budget
    edge = data.draw(st.sampled_from([16, budget, budget, 2 * budget, 4 * budget]))
    scanner = KeyLineScanner(policy, back_window=7, edge=edge)
    for start in range(0, len(stored), piece):
        scanner.feed(stored[start : start + piece])
    told = PreviewText(
        text,
        text,
        whole=True,
        key_lines=scanner.result(),
        line_count=line_count(text),
        size_bytes=len(stored),
        key_line_edge=edge,
    )
    source = source_for(text)
    assert _preview_or_refusal(told, source, policy) == _preview_or_refusal(
        PreviewText(text, text, whole=True), source, policy
    )


def test_a_key_line_the_head_shows_the_start_of_counts_for_the_head() -> None:
    # One long line: the head shows its start, "ERROR:", the tail its end.
    # A store pass and a rescan must both see that the head shows a key line.
    text = "ERROR:" + "\u6f22\u5b57\u30c6\u30ad\u30b9\u30c8" * 98
    policy = replace(
        SMALL[SizeUnit.BYTES],
        tool_limits={"t": ToolLimit(2085, SizeUnit.BYTES)},
        max_key_lines=1,
    )
    stored = text.encode()
    scanner = KeyLineScanner(policy, back_window=7, edge=16)
    scanner.feed(stored)
    told = PreviewText(
        text,
        text,
        whole=True,
        key_lines=scanner.result(),
        line_count=1,
        size_bytes=len(stored),
        key_line_edge=16,
    )
    source = source_for(text)
    rescanned = build_preview(PreviewText(text, text, whole=True), source, policy)
    assert build_preview(told, source, policy) == rescanned
    assert "[key lines from the omitted part" not in rescanned


def _preview_or_refusal(
    text: PreviewText, source: PreviewSource, policy: SpillPolicy
) -> str:
    try:
        return build_preview(text, source, policy)
    except ValueError as refusal:
        return f"refused: {refusal}"


@settings(max_examples=100)
@given(text=texts, unit=units, data=st.data())
def test_windowed_previews_keep_every_promise(
    text: str, unit: SizeUnit, data: st.DataObject
) -> None:
    policy = SMALL[unit]
    budget = policy.limit_for("t").budget
    size = policy.measure(text, unit)
    head_len = data.draw(st.integers(min_value=0, max_value=len(text)))
    tail_len = data.draw(st.integers(min_value=0, max_value=len(text) - head_len))
    if size <= budget or head_len + tail_len == len(text):
        return  # the gate windows only outputs over their limit, with a middle
    head_win, tail_win = text[:head_len], text[len(text) - tail_len :]
    scanner = KeyLineScanner(policy)
    scanner.feed(text.encode("utf-8", "surrogatepass"))
    source = source_for(text)
    preview = PreviewText(head_win, tail_win, whole=False, key_lines=scanner.result())
    out = build_preview(preview, source, policy)
    assert policy.measure(out, unit) <= budget
    got = parse(out, source)
    head_shown, tail_shown = clean_terminal(head_win), clean_terminal(tail_win)
    assert head_shown.startswith(got.head)
    assert tail_shown.endswith(got.tail)
    assert got.unit == "bytes"
    shown = (got.head + got.tail).encode("utf-8", "surrogatepass")
    assert got.omitted_units == source.total_bytes - len(shown)
    # Cleaning keeps newlines, so the pieces cleaned apart number lines as one.
    middle = clean_terminal(text[head_len : len(text) - tail_len])
    screen = head_shown + middle + tail_shown
    tail_start = len(screen) - len(got.tail)
    hidden = omitted_line_numbers(
        screen,
        len(got.head),
        tail_start,
        head_known=len(got.head) < len(head_shown),
        tail_known=len(got.tail) < len(tail_shown),
        output=text,
    )
    assert got.omitted_lines == len(hidden)
    for number, _ in got.key_lines:
        assert number in hidden


# ---------------------------------------------------------------- boundaries


def test_exactly_at_one_over_and_far_over_the_limit() -> None:
    policy = SpillPolicy()
    bash = policy.limit_for("bash")
    at = "".join(f"{i:05d} ok\n" for i in range(bash.limit // 9)) + "x" * (
        bash.limit % 9
    )
    assert policy.measure(at, bash.unit) == bash.limit  # the gate: under_limit
    for text in (at + "y", at * 7):
        source = source_for(text, tool="bash")
        out = build_preview(PreviewText(text, text, whole=True), source, policy)
        got = check_whole(out, text, policy, source)
        assert len(out) <= bash.limit
        assert got.head.endswith("\n")  # line ends are preferred
        assert got.tail.startswith(tuple("0123456789"))


@pytest.mark.parametrize("unit", list(SizeUnit))
def test_budget_in_each_unit_just_past_where_head_and_tail_would_meet(
    unit: SizeUnit,
) -> None:
    policy = SMALL[unit]
    budget = policy.limit_for("t").budget
    base = "word 字 😀 e\u0301\n" * 400
    # Texts from well under the budget to a little over it: the preview may
    # never overlap head and tail, nor grow past the text.
    for size in range(budget - 40, budget + 40, 3):
        # the longest prefix of `base` measuring at most `size`
        low, high = 0, len(base)
        while low < high:
            middle = (low + high + 1) // 2
            if policy.measure(base[:middle], unit) <= size:
                low = middle
            else:
                high = middle - 1
        text = base[:low]
        source = source_for(text)
        try:
            out = build_preview(PreviewText(text, text, whole=True), source, policy)
        except ValueError:
            assert policy.measure(text, unit) < budget
            continue
        check_whole(out, text, policy, source)


def test_a_text_smaller_than_header_and_notice_is_refused() -> None:
    policy = SMALL[SizeUnit.CHARS]
    text = "tiny\n" * 3
    with pytest.raises(ValueError, match="header and notice"):
        build_preview(PreviewText(text, text, whole=True), source_for(text), policy)


def test_a_whole_preview_text_must_be_one_text() -> None:
    with pytest.raises(ValueError, match="head == tail"):
        build_preview(
            PreviewText("a", "b", whole=True), source_for("ab"), SpillPolicy()
        )


@pytest.mark.parametrize("first", [200, 100_000])
@pytest.mark.parametrize("unit", list(SizeUnit))
def test_a_long_first_line(first: int, unit: SizeUnit) -> None:
    policy = small_policy(unit, 3000)
    text = "A" * (first - 1) + "é\n" + "".join(f"row {i}\n" for i in range(2, 3000))
    source = source_for(text)
    out = build_preview(PreviewText(text, text, whole=True), source, policy)
    got = check_whole(out, text, policy, source)
    assert got.head  # the head shows the start of the long line, not nothing
    assert got.tail.endswith("row 2999\n")
    if first == 100_000:
        assert "\n" not in got.head  # cut inside the first line, on a character
        assert got.first_line == 1


@pytest.mark.parametrize(
    ("unit", "text"),
    [
        (SizeUnit.CHARS, "x" * 99_999),
        (SizeUnit.BYTES, "x" * 99_999),
        (SizeUnit.BYTES, "字" * 33_333),  # head and tail may each lose 2 bytes
        (SizeUnit.CHARS, "ab\n" * 33_333),
    ],
)
def test_the_budget_is_used_to_the_last_unit(unit: SizeUnit, text: str) -> None:
    # Counts as wide as their totals and cuts that need no line end or
    # cluster adjustment leave no slack: header and notice are priced exactly.
    policy = small_policy(unit, 12_000)
    source = source_for(text)
    out = build_preview(PreviewText(text, text, whole=True), source, policy)
    check_whole(out, text, policy, source)
    if "\n" not in text:
        slack = 0 if text.isascii() else 4
        assert 12_000 - slack <= policy.measure(out, unit) <= 12_000


def test_line_ends_are_preferred_within_a_window() -> None:
    policy = small_policy(SizeUnit.CHARS, 4000)
    text = "".join(f"{i:04d} {'-' * 40}\n" for i in range(2000))
    out = build_preview(PreviewText(text, text, whole=True), source_for(text), policy)
    got = check_whole(out, text, policy, source_for(text))
    assert got.head.endswith("\n")
    assert text[len(text) - len(got.tail) - 1] == "\n"
    assert got.tail.startswith(tuple("0123456789"))


def test_crlf_line_ends_show_as_line_ends_and_cuts_still_find_them() -> None:
    text = "\r\n".join(["x" * 3000] * 12)
    source = source_for(text)
    seen = set()
    for budget in range(6000, 6700, 1):
        policy = small_policy(SizeUnit.CHARS, budget, head_ratio=1, tail_ratio=1)
        out = build_preview(PreviewText(text, text, whole=True), source, policy)
        got = check_whole(out, text, policy, source)
        assert "\r" not in out
        seen.add(len(got.head))
    assert 3000 in seen  # the cut really did come to the line end


def test_the_head_to_tail_ratio_is_about_one_to_four() -> None:
    policy = small_policy(SizeUnit.CHARS, 12000)
    text = "x" * 100_000  # no line ends: cuts land exactly
    source = source_for(text)
    got = parse(build_preview(PreviewText(text, text, True), source, policy), source)
    assert abs(len(got.tail) - 4 * len(got.head)) <= 5


# ---------------------------------------------------------------- key lines


def numbered(count: int, errors: dict[int, str]) -> str:
    return "".join(f"{errors.get(i, f'ok {i}')}\n" for i in range(1, count + 1))


def test_key_lines_come_from_the_middle_with_their_line_numbers() -> None:
    errors = {
        3: "ERROR in the head",
        700: "Traceback (most recent call last):",
        1200: "AssertionError: 1 != 2",
        1999: "FAILED in the tail",
    }
    text = numbered(2000, errors)
    policy = small_policy(SizeUnit.BYTES, 6000)
    source = source_for(text)
    got = check_whole(
        build_preview(PreviewText(text, text, whole=True), source, policy),
        text,
        policy,
        source,
    )
    assert "ERROR in the head" in got.head
    assert "FAILED in the tail" in got.tail
    assert got.key_lines == [(700, errors[700]), (1200, errors[1200])]
    # the same through windows and the streaming scanner, as the gate does it
    scanner = KeyLineScanner(policy)
    data = text.encode()
    for i in range(0, len(data), 777):
        scanner.feed(data[i : i + 777])
    window = PreviewText(
        text[:5000], text[-5000:], whole=False, key_lines=scanner.result()
    )
    windowed = parse(build_preview(window, source, policy), source)
    assert windowed.key_lines == got.key_lines


_WORD = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(40)]


def test_many_key_lines_are_capped_earliest_and_latest_first() -> None:
    # Distinct diagnostics (no two alike), so none collapses into a note.
    errors = {i: f"error {_WORD[i // 50]} here" for i in range(100, 1900, 50)}
    text = numbered(2000, errors)
    policy = small_policy(SizeUnit.CHARS, 8000, max_key_lines=5)
    source = source_for(text)
    got = check_whole(
        build_preview(PreviewText(text, text, True), source, policy),
        text,
        policy,
        source,
    )
    tail_start = len(text) - len(got.tail)
    hidden = omitted_line_numbers(
        text, len(got.head), tail_start, head_known=True, tail_known=True
    )
    middle = [n for n in errors if n in hidden]
    assert len(middle) > 5
    assert [n for n, _ in got.key_lines] == middle[:3] + middle[-2:]


def test_key_lines_only_when_they_fit() -> None:
    long_errors = {1000 + 50 * i: f"error {_WORD[i]} " + "x" * 400 for i in range(10)}
    text = numbered(3000, long_errors)
    source = source_for(text)
    tight = small_policy(SizeUnit.CHARS)  # the tightest budget allowed
    out = build_preview(PreviewText(text, text, True), source, tight)
    got = check_whole(out, text, tight, source)
    block = out[out.index("[key lines") : len(out) - len(got.tail)]
    room = tight.limit_for("t").limit - (len(out) - len(got.head) - len(got.tail))
    # A block takes at most half the room (the head shows no key line here).
    assert 0 < len(got.key_lines) < 10
    assert len(block) <= (room + len(block)) // 2
    roomy = small_policy(SizeUnit.CHARS, 9000)
    got = check_whole(
        build_preview(PreviewText(text, text, True), source, roomy), text, roomy, source
    )
    assert [n for n, _ in got.key_lines] == sorted(long_errors)
    assert got.key_lines[0][1] == long_errors[1000][:200] + "..."


@pytest.mark.parametrize("whole", [True, False])
def test_given_candidates_are_kept_only_from_the_middle(whole: bool) -> None:
    text = "".join(f"error {i:04d}\n" for i in range(1, 3001))
    every = tuple((i, f"error {i:04d}") for i in range(1, 3001))
    policy = small_policy(SizeUnit.CHARS, 8000)
    source = source_for(text)
    head, tail = (text, text) if whole else (text[:4000], text[-9000:])
    out = build_preview(PreviewText(head, tail, whole, key_lines=every), source, policy)
    got = parse(out, source)
    tail_start = len(text) - len(got.tail)
    hidden = omitted_line_numbers(
        text,
        len(got.head),
        tail_start,
        head_known=whole or len(got.head) < len(head),
        tail_known=whole or len(got.tail) < len(tail),
    )
    numbers = [n for n, _ in got.key_lines]
    assert set(numbers) <= set(hidden)
    # Alike lines: the earliest of the middle (as the widest cut saw it), then
    # one note counting the rest of the candidates kept.
    assert numbers == [numbers[0]]
    assert numbers[0] - hidden[0] < 10
    assert got.notes == [(numbers[0], got.notes[0][1])]
    assert got.notes[0][1] >= 2 * kept_per_end(policy.max_key_lines) - 1
    if whole:
        check_whole(out, text, policy, source)


def test_key_lines_can_be_turned_off() -> None:
    text = numbered(2000, {1000: "error"})
    policy = small_policy(SizeUnit.CHARS, 8000, max_key_lines=0)
    source = source_for(text)
    got = parse(build_preview(PreviewText(text, text, True), source, policy), source)
    assert got.key_lines == []


# ---------------------------------------------------------------- terminal noise

RED, GREEN, RESET = "\x1b[31m", "\x1b[32m", "\x1b[0m"


def colored(count: int, failed_at: int) -> str:
    """Colored test lines, a progress line redrawn with CRs, CRLF line ends."""
    lines = []
    for n in range(1, count + 1):
        if n == failed_at:
            lines.append(f"{RED}FAILED{RESET} test_{n:04d}\r\n")
        elif n % 100 == 0:
            lines.append(f"download 10%\rdownload 60%\r{GREEN}download 100%{RESET}\n")
        else:
            lines.append(f"test_{n:04d} {GREEN}PASSED{RESET}\n")
    return "".join(lines)


@pytest.mark.parametrize("unit", list(SizeUnit))
def test_a_colored_output_is_previewed_clean_line_for_line(unit: SizeUnit) -> None:
    text = colored(3000, failed_at=1500)
    policy = small_policy(unit, 4000)
    source = source_for(text)
    out = build_preview(PreviewText(text, text, whole=True), source, policy)
    assert "\x1b" not in out
    assert "\r" not in out
    got = check_whole(out, text, policy, source)  # line numbers: the output's
    assert (1500, f"FAILED test_{1500:04d}") in got.key_lines
    assert got.tail.endswith("test_2999 PASSED\ndownload 100%\n")  # line 3000


def test_windows_are_cleaned_and_given_key_lines_shown_clean() -> None:
    text = colored(3000, failed_at=1500)
    text = text.replace("test_2222 ", f"{RED}error 10%\rok{RESET} ")  # overwritten
    policy = small_policy(SizeUnit.CHARS, 4000)
    lines = text.split("\n")
    given = ((1500, lines[1499]), (2222, lines[2221]))  # raw, as a scanner gives
    assert policy.is_key_line(lines[2221])  # "error" before it was overwritten
    source = source_for(text)
    window = PreviewText(text[:6000], text[-6000:], whole=False, key_lines=given)
    out = build_preview(window, source, policy)
    assert "\x1b" not in out
    assert "\r" not in out
    got = parse(out, source)
    assert got.key_lines == [(1500, "FAILED test_1500")]  # 2222 shows "ok" now
    total = text.count("\n")
    assert got.first_line is not None
    assert got.first_line + got.omitted_lines - 1 == total - got.tail.count("\n")


def test_a_last_line_that_cleans_to_nothing_still_counts() -> None:
    text = "".join(f"row {n}\n" for n in range(1, 2001)) + RESET  # line 2001
    policy = small_policy(SizeUnit.CHARS, 3000)
    source = source_for(text)
    assert source.total_lines == 2001
    out = build_preview(PreviewText(text, text, whole=True), source, policy)
    got = check_whole(out, text, policy, source)
    assert got.tail.endswith("row 2000\n")
    assert got.first_line is not None
    assert got.first_line + got.omitted_lines == 2001 - got.tail.count("\n")


def test_a_whole_view_shows_everything_and_a_pointer_nothing() -> None:
    text = f"{GREEN}ok{RESET}\r\nall 3 passed\n"
    source = source_for(text)
    whole = build_whole(text, source)
    assert whole.startswith(render_header(source) + "ok\nall 3 passed\n\n")
    got = parse(whole, source)
    assert (got.head, got.tail, got.omitted_units, got.omitted_lines) == (
        "ok\nall 3 passed\n",
        "",
        0,
        0,
    )
    pointer = parse(build_pointer(source, "[described]"), source)
    assert (pointer.head, pointer.tail) == ("[described]", "")
    assert (pointer.omitted_lines, pointer.first_line) == (2, 1)
    assert pointer.omitted_units == source.total_bytes


def test_a_match_deep_in_a_very_long_line_is_not_a_key_line() -> None:
    policy = SpillPolicy()
    text = "x" * 90_000 + " error\nerror early\n"
    assert scan_key_lines(text, policy) == ((2, "error early"),)


scanner_texts = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
        st.sampled_from(["\n", "\r\n", "error", "字", "😀", "\u2028", "\x85"]),
        st.sampled_from(
            ["FAILED", "Traceback", "fa\u0130l", "\u017fegmentation fault"]
        ),
        st.integers(min_value=490, max_value=2100).map(lambda n: "é" * n + "error"),
    ),
    max_size=40,
).map("".join)


SCANNED = [
    # "^$": empty lines count as lines too
    SpillPolicy(key_line_patterns=("error", "[a-c]", "^$"), max_key_lines=2),
    SpillPolicy(max_key_lines=2),  # the built-in patterns, screened
]


@given(
    text=scanner_texts,
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    policy=st.sampled_from(SCANNED),
)
def test_the_scanner_over_any_chunking_equals_a_whole_text_scan(
    text: str, cuts: list[int], policy: SpillPolicy
) -> None:
    data = text.encode()
    points = sorted({c % (len(data) + 1) for c in cuts})
    scanner = KeyLineScanner(policy)
    for start, end in zip([0, *points], [*points, len(data)], strict=True):
        scanner.feed(data[start:end])  # may split a character or a CRLF
    assert scanner.result() == scan_key_lines(text, policy)
    assert scanner.result() == scanner.result()  # reading does not consume


@given(text=scanner_texts)
def test_screening_finds_what_matching_every_line_finds(text: str) -> None:
    screened = SpillPolicy(max_key_lines=3)
    # the same patterns, one twice: the same meaning, no screen, every line tried
    patterns = screened.key_line_patterns
    plain = replace(screened, key_line_patterns=(*patterns, patterns[0]))
    assert screened.key_line_screen is not None
    assert plain.key_line_screen is None
    assert scan_key_lines(text, screened) == scan_key_lines(text, plain)


def test_the_scanner_keeps_first_and_last_candidates_with_bounded_memory() -> None:
    policy = SpillPolicy(max_key_lines=2)
    scanner = KeyLineScanner(policy)
    for i in range(1, 101):
        scanner.feed(f"error {i}\n".encode())
    numbers = [n for n, _ in scanner.result()]
    assert numbers == [1, 2, 3, 4, 97, 98, 99, 100]
    scanner.feed(b"error " + b"y" * 10_000_000)  # a 10 MB line, unterminated
    assert len(scanner._buffer) <= KEY_LINE_SCAN_BYTES
    last = scanner.result()[-1]
    assert last[0] == 101
    assert len(last[1]) == KEY_LINE_SCAN_CHARS


def test_the_scanner_decodes_bad_bytes_with_replacement() -> None:
    scanner = KeyLineScanner(SpillPolicy())
    scanner.feed(b"ok\n\xff\xfe fatal \xe2\x82\n")
    assert scanner.result() == ((2, "\ufffd\ufffd fatal \ufffd"),)


# ---------------------------------------------------------------- fixed parts


def test_fixed_parts_fit_the_defaults() -> None:
    policy = SpillPolicy()
    for tool in ("bash", "grep", "x" * 64):
        assert fixed_parts_fit(policy, tool)
        assert fixed_parts_fit(
            policy, tool, tool_use_id="toolu_01A09q90qw90lq917835lq9", is_error=True
        )


def test_fixed_parts_do_not_fit_a_tiny_budget() -> None:
    unit = SizeUnit.CHARS
    policy = small_policy(unit)  # the budget is exactly the worst case
    assert fixed_parts_fit(policy, "t", is_error=True)
    assert not fixed_parts_fit(policy, "t", tool_use_id="toolu_1", is_error=True)
    # the default limit is checked for names up to 64 characters at load time
    tight = worst_fixed_size(policy, "y" * 64, unit, is_error=True)
    policy = replace(policy, default_limit=ToolLimit(tight, unit))
    assert fixed_parts_fit(policy, "y" * 64, is_error=True)
    assert not fixed_parts_fit(policy, "y" * 80, is_error=True)  # longer, per call
    # a long tool_use_id on defaults is too much as well
    assert not fixed_parts_fit(SpillPolicy(), "bash", tool_use_id="u" * 30000)


def test_fixed_parts_fit_with_a_known_session_is_tighter() -> None:
    policy = SMALL[SizeUnit.BYTES]
    generic = worst_fixed_size(policy, "t", SizeUnit.BYTES)
    known = worst_fixed_size(policy, "t", SizeUnit.BYTES, session_id="s1")
    assert known < generic


@settings(max_examples=60)
@given(
    unit=units,
    handle_len=st.integers(min_value=1, max_value=64),
    fill=st.sampled_from(["h", "é", "字", "😀", "\n", "\u2028"]),
    summary=st.text(min_size=1, max_size=240),
    tool_use_id=st.none() | st.text(max_size=20),
    flags=st.tuples(st.booleans(), st.booleans()),
)
def test_when_fixed_parts_fit_a_preview_can_always_be_built(
    *,
    unit: SizeUnit,
    handle_len: int,
    fill: str,
    summary: str,
    tool_use_id: str | None,
    flags: tuple[bool, bool],
) -> None:
    base = SMALL[unit]
    # Rendered handle and hint are at most the declared UTF-8 byte lengths.
    rendered = "\\u2028" if fill == "\u2028" else "\\x0a" if fill == "\n" else fill
    handle = fill * (handle_len // len(rendered.encode()))
    budget = worst_fixed_size(base, "t", unit, tool_use_id=tool_use_id, is_error=True)
    policy = replace(base, tool_limits={"t": ToolLimit(budget, unit)})
    assert fixed_parts_fit(policy, "t", tool_use_id=tool_use_id, is_error=flags[0])
    text = "data 字 😀\n" * 2000
    source = source_for(
        text,
        summary=summary,
        handle=handle,
        hint="h" * 100,
        tool_use_id=tool_use_id,
        is_error=flags[0],
        partial=flags[1],
    )
    out = build_preview(PreviewText(text, text, True), source, policy)
    assert policy.measure(out, unit) <= budget


def rendered_bytes(text: str) -> int:
    return len(_escape(text).encode("utf-8", "surrogatepass"))


def clip_rendered(text: str, limit: int) -> str:
    """The longest prefix of `text` whose rendering fits `limit` bytes."""
    out = ""
    for char in text:
        if rendered_bytes(out + char) > limit:
            break
        out += char
    return out


def exactly(fill: str, limit: int) -> str:
    """A string of `fill` padded with "!" to render in exactly `limit` bytes."""
    base = clip_rendered(fill * limit, limit)
    return base + "!" * (limit - rendered_bytes(base))


def within_bytes(limit: int) -> st.SearchStrategy[str]:
    """Strings whose rendering takes at most `limit` UTF-8 bytes (often exactly)."""
    alphabet = ["!", "a", "字", "😀", "\u0301", "\n", "\u2028", " "]
    return st.one_of(
        st.sampled_from(alphabet).map(lambda fill: exactly(fill, limit)),
        st.text(alphabet=st.sampled_from(alphabet), max_size=limit).map(
            lambda text: clip_rendered(text, limit)
        ),
    )


SOURCE0 = source_for("x")


@settings(max_examples=80)
@given(
    unit=units,
    session=within_bytes(255).filter(bool),
    summary=st.text(max_size=240) | st.just("😀" * 240) | st.just("!" * 240),
    handle=within_bytes(64),
    hint=within_bytes(100),
    flags=st.tuples(st.booleans(), st.booleans()),
    # a real span ends below line 10**20 (counts stay below 2**64), so it does here
    counts=st.tuples(*[st.integers(min_value=0, max_value=10**20 - 1)] * 4).filter(
        lambda c: c[2] + c[0] - 1 < 10**20
    ),
)
def test_the_worst_case_bounds_every_call_within_the_declared_limits(
    *,
    unit: SizeUnit,
    session: str,
    summary: str,
    handle: str,
    hint: str,
    flags: tuple[bool, bool],
    counts: tuple[int, int, int, int],
) -> None:
    policy = SMALL[unit]
    source = replace(
        SOURCE0,
        source_id=f"artifact:{session}:tool_result_{counts[3]:03d}.txt:0123456789ab",
        summary=summary,
        handle=handle,
        hint=hint,
        is_error=flags[0],
        partial=flags[1],
    )
    worst = worst_fixed_size(policy, "t", unit, is_error=True)
    for notice_unit in {unit, SizeUnit.BYTES}:
        notice = render_notice(
            source, counts[0], counts[1], notice_unit, first_line=counts[2]
        )
        fixed = render_header(source) + "\n" + notice
        assert policy.measure(fixed, unit) <= worst


@pytest.mark.parametrize(("unit", "fill"), [("chars", "!"), ("bytes", "😀")])
def test_the_worst_case_is_nearly_attained(unit: SizeUnit, fill: str) -> None:
    policy = SMALL[unit]
    most = 10**20 - 1
    source = replace(
        SOURCE0,
        source_id=f"artifact:{exactly(fill, 255)}:tool_result_{most}.txt:0123456789ab",
        summary=fill * 240,
        handle=exactly(fill, 64),
        hint=exactly(fill, 100),
        is_error=True,
        partial=True,
    )
    notice = render_notice(source, most, most, unit, first_line=1)
    largest = policy.measure(render_header(source) + "\n" + notice, unit)
    worst = worst_fixed_size(policy, "t", unit, is_error=True)
    # a span of 10**20 - 1 lines cannot also start at line 10**20 - 1, and
    # the notice shows its start twice (the span and the read call)
    assert largest <= worst <= largest + 2 * 19


def test_an_overlong_handle_per_call_is_a_value_error_not_an_overflow() -> None:
    policy = SMALL[SizeUnit.CHARS]
    text = "data\n" * 5000
    source = source_for(text, handle="/" + "h" * 5000)
    with pytest.raises(ValueError, match="header and notice"):
        build_preview(PreviewText(text, text, True), source, policy)


# ---------------------------------------------------------------- rendering


def test_the_header_names_its_provenance() -> None:
    text = "x\n" * 10
    plain = render_header(source_for(text))
    assert plain.count("\n") == 2
    for part in (
        "artifact:sess:tool_result_001.txt:0123456789ab",
        "tool: t",
        "sha256: ",
    ):
        assert part in plain
    assert "tool_use_id" not in plain
    assert "is_error" not in plain
    assert "partial" not in plain
    full = render_header(
        source_for(text, tool_use_id="toolu_9", is_error=True, partial=True)
    )
    assert "tool_use_id: toolu_9" in full
    assert "is_error: true" in full
    assert "partial" in full


def test_line_breaks_in_identifiers_cannot_break_the_layout() -> None:
    source = source_for(
        "x",
        summary="two\nlines\u2028here",
        tool_use_id="a\nb",
        handle="/p/a\nb\u2028c",
        hint="h\r",
    )
    header = render_header(source)
    assert header.count("\n") == 2
    assert "\u2028" not in header
    assert "tool_use_id: a\\x0ab" in header
    notice = render_notice(source, 3, 120, SizeUnit.BYTES, first_line=4)
    assert notice.count("\n") == 1
    assert notice.endswith("\n")
    assert "/p/a\\x0ab\\u2028c" in notice
    assert "lines 4-6" in notice
    assert "120 bytes omitted, 3 lines" in notice


def test_an_odd_token_counter_still_gets_a_budgeted_preview() -> None:
    def lumpy(text: str) -> int:  # not additive: joins change the count
        return (len(text) + 3) // 4 + text.count("\n\n") * 3

    base = SpillPolicy(max_handle_length=64, max_hint_length=100, token_counter=lumpy)
    worst = worst_fixed_size(base, "t", SizeUnit.TOKENS, is_error=True)
    policy = replace(base, tool_limits={"t": ToolLimit(worst + 300, SizeUnit.TOKENS)})
    text = "para\n\n" * 3000
    source = source_for(text)
    out = build_preview(PreviewText(text, text, True), source, policy)
    check_whole(out, text, policy, source)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "ok",
                "ERROR x",
                "Failed",
                "fine",
                "traceback",
                "",
                "panic!",
                "Ünicode error",
            ]
        ),
        max_size=300,
    ),
    st.lists(st.integers(1, 200), max_size=20),
)
def test_dense_key_lines_fed_in_pieces_match_a_whole_scan(
    lines: list[str], cuts: list[int]
) -> None:
    # Dense matches exercise the ASCII fast path's backwards pass.
    text = "\n".join(lines) + ("\n" if len(lines) % 2 else "")
    data = text.encode()
    scanner = KeyLineScanner(SpillPolicy())
    position = 0
    for cut in cuts:
        scanner.feed(data[position : position + cut])
        position += cut
    scanner.feed(data[position:])
    assert scanner.result() == scan_key_lines(text, SpillPolicy())
