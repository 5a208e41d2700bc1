"""The key-line screen and the scanner's ASCII fast path (S1.6)."""

from __future__ import annotations

import re
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from spillvault.domain import key_line_match, screen
from spillvault.domain.key_lines import (
    KEY_LINE_SCAN_CHARS,
    KeyLine,
    KeyLineScanner,
    scan_key_lines,
)
from spillvault.domain.policy import SCREEN_WORDS, SpillPolicy
from spillvault.domain.terminal import clean_terminal

WORDS = [word.encode() for word in SCREEN_WORDS]

# ASCII lines, most of them carrying a screen word in some case, some a word
# split by a newline or glued to another: the fast path's territory.
ascii_lines = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "ok",
                "ERROR: upstream 502",
                "Failed to fetch",
                "traceback (most recent call last)",
                "",
                "PANIC! at the disco",
                "Segmentation Fault (core dumped)",
                "error" * 3,
                "fail",
                "erro",
                "r",
                "assertion ok",
                "exceptional",
            ]
        ),
        st.text(alphabet="abcdefilnoprstuERFOAIL :!", max_size=30),
    ),
    max_size=200,
)


def reference_key_lines(text: str, policy: SpillPolicy) -> tuple[KeyLine, ...]:
    """S1.6 by the letter: every line judged on its scanned start; both ends kept."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it starts none
    # A line is judged on its first characters and, for a recognizer's `$` or
    # `\b`, the one after them (issue 20).
    judged = [clean_terminal(line)[: KEY_LINE_SCAN_CHARS + 1] for line in lines]
    found = [
        (number, line[:KEY_LINE_SCAN_CHARS])
        for number, line in enumerate(judged, 1)
        if policy.judge_key_line(line)
    ]
    cap = 2 * policy.max_key_lines
    if len(found) <= 2 * cap:
        return tuple(found)
    return tuple(found[:cap] + found[len(found) - cap :])


def naive_word_starts(data: bytes, start: int, stop: int) -> list[int]:
    lowered = data.lower()
    found = set()
    for word in WORDS:
        at = lowered.find(word, start)
        while 0 <= at < stop:
            found.add(at)
            at = lowered.find(word, at + 1)
    return sorted(found)


def test_hyperscan_is_available_here() -> None:
    # A dependency on Linux: without it every scan takes the general path.
    assert screen.AVAILABLE


@given(lines=ascii_lines, bounds=st.tuples(st.integers(0, 9999), st.integers(0, 9999)))
def test_word_starts_finds_what_a_naive_search_finds(
    lines: list[str], bounds: tuple[int, int]
) -> None:
    data = "\n".join(lines).encode()
    start, stop = sorted(b % (len(data) + 1) for b in bounds)
    starts = screen.word_starts(data, start, stop)
    # (overlapping words at one offset are reported once each)
    assert sorted(set(starts)) == naive_word_starts(data, start, stop)


@given(lines=ascii_lines, stop_after=st.integers(1, 20))
def test_each_word_visits_in_line_order_and_stops_when_told(
    lines: list[str], stop_after: int
) -> None:
    data = "\n".join(lines).encode()
    seen: list[int] = []

    def visit(at: int) -> bool:
        seen.append(at)
        return len(seen) == stop_after

    screen.each_word(data, 0, len(data), visit)
    expected = naive_word_starts(data, 0, len(data))
    assert set(seen) <= set(expected)
    assert len(seen) == min(stop_after, len(seen_all := _all_visits(data)))
    assert seen == seen_all[: len(seen)]
    line_of = [data.count(b"\n", 0, at) for at in seen]
    assert line_of == sorted(line_of)


def _all_visits(data: bytes) -> list[int]:
    visits: list[int] = []
    screen.each_word(data, 0, len(data), lambda at: visits.append(at) is not None)
    return visits


@settings(max_examples=200, deadline=None)
@given(
    lines=ascii_lines,
    cuts=st.lists(st.integers(1, 400), max_size=12),
    window=st.sampled_from([1, 2, 7, 64, 4096]),
    max_key_lines=st.integers(0, 4),
)
def test_the_fast_path_in_any_window_equals_a_whole_text_scan(
    lines: list[str], cuts: list[int], window: int, max_key_lines: int
) -> None:
    text = "\n".join(lines)
    data = text.encode()
    policy = SpillPolicy(max_key_lines=max_key_lines)
    scanner = KeyLineScanner(policy, back_window=window)
    position = 0
    for cut in cuts:
        piece = data[position : position + cut]
        scanner.feed(piece, piece.count(b"\n") if cut % 2 else None)
        position += cut
    scanner.feed(data[position:])
    assert scanner.result() == reference_key_lines(text, policy)
    assert scan_key_lines(text, policy) == reference_key_lines(text, policy)


def test_a_megabyte_of_dense_key_lines_keeps_the_right_ends() -> None:
    lines = [f"{i} {'ERROR' if i % 3 == 0 else 'info'} row" for i in range(1, 60_001)]
    data = ("\n".join(lines) + "\n").encode()
    scanner = KeyLineScanner(SpillPolicy(max_key_lines=3))
    for start in range(0, len(data), 1 << 20):
        scanner.feed(data[start : start + (1 << 20)])
    numbers = [n for n, _ in scanner.result()]
    assert numbers == [
        3,
        6,
        9,
        12,
        15,
        18,
        59_985,
        59_988,
        59_991,
        59_994,
        59_997,
        60_000,
    ]


any_text = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
        st.sampled_from(["\n", "\r\n", "error", "字", "\u2028", "fa\u0130l"]),
        st.sampled_from(["Segmentation fault", "\u017fegmentation fault", "Traceback"]),
        # terminal noise: a key line is judged as the terminal shows it
        st.sampled_from(["\x1b[31m", "\x1b[0m", "\x1b]8;;http://x\x07", "\r", "\x1b"]),
    ),
    max_size=40,
).map("".join)


@given(text=any_text, max_key_lines=st.integers(0, 3))
def test_any_text_scans_as_the_reference_says(text: str, max_key_lines: int) -> None:
    policy = SpillPolicy(max_key_lines=max_key_lines)
    expected = reference_key_lines(text, policy)
    assert scan_key_lines(text, policy) == expected
    scanner = KeyLineScanner(policy)
    scanner.feed(text.encode())
    assert scanner.result() == expected


# ------------------------------------------------ the engine behind is_key_line


def test_the_pattern_engine_is_available_here() -> None:
    assert key_line_match.AVAILABLE


def test_the_ascii_stand_in_keeps_what_the_built_in_patterns_tell_apart() -> None:
    every = "".join(map(chr, range(0x110000)))  # lone surrogates too
    stand_in = key_line_match.ascii_stand_in(every)
    assert stand_in.isascii()
    assert len(stand_in) == len(every)

    def where(pattern: str, text: str, flags: int = 0) -> list[int]:
        return [match.start() for match in re.finditer(pattern, text, flags)]

    # what the built-in patterns read: \w (and so \b), a space, letters in any case
    assert where(r"\w", stand_in) == where(r"\w", every)
    assert where(" ", stand_in) == where(" ", every)
    for letter in string.ascii_lowercase:
        assert where(letter, stand_in, re.IGNORECASE) == where(
            letter, every, re.IGNORECASE
        )


# Patterns without \w, \d, \s or \b mean in Hyperscan what they meant in re.
PLAIN_PATTERNS = (r"^.rror$", r"x[^a]y", "\u00e9t\u00e9", r"^$", r"tail$")


def python_key_line_numbers(text: str) -> list[int]:
    return [
        number
        for number, line in enumerate(text.split("\n"), 1)
        if any(
            re.search(pattern, line[:KEY_LINE_SCAN_CHARS], re.IGNORECASE)
            for pattern in PLAIN_PATTERNS
        )
    ]


def test_custom_patterns_judge_bytes_that_are_not_utf8_by_their_decoded_text() -> None:
    policy = SpillPolicy(key_line_patterns=PLAIN_PATTERNS, max_key_lines=8)
    data = b"\xffrror\nx\xffy\nx\xed\xa0\x80y\n\xc3\x89T\xc3\xa9 \xe9t\xe9\n\nat tail"
    scanner = KeyLineScanner(policy)
    scanner.feed(data)
    text = data.decode("utf-8", "replace")
    assert [n for n, _ in scanner.result()] == python_key_line_numbers(text)
    assert [n for n, _ in scanner.result()] == [1, 2, 4, 5, 6]
    assert scanner.result() == scan_key_lines(text, policy)


def test_custom_patterns_judge_lone_surrogates_as_re_does() -> None:
    policy = SpillPolicy(key_line_patterns=PLAIN_PATTERNS, max_key_lines=8)
    text = "\udc80rror\nx\ud800y\nx\ud800\udc00y\n\u00c9t\u00e9\ud800\nok tail"
    found = [n for n, _ in scan_key_lines(text, policy)]
    assert found == python_key_line_numbers(text) == [1, 2, 4, 5]


def test_coloured_key_lines_are_found_in_big_ascii_blocks() -> None:
    # The fast path screens raw ASCII; colour codes glued to a word hide its
    # word boundary, so noisy blocks are judged as the terminal shows them.
    policy = SpillPolicy()
    noise = b"".join(b"\x1b[32mPASSED\x1b[0m test_%d\n" % n for n in range(20_000))
    data = noise + b"\x1b[31mFAILED\x1b[0m test_x - boom\n" + noise
    scanner = KeyLineScanner(policy)
    scanner.feed(data)
    assert scanner.result() == ((20_001, "FAILED test_x - boom"),)
    assert scan_key_lines(data.decode(), policy) == scanner.result()


def _line_starts(data: bytes) -> list[int]:
    """Byte offset where each line starts (a final newline starts none)."""
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == 0x0A]
    return starts[:-1] if data.endswith(b"\n") else starts


@settings(max_examples=150, deadline=None)
@given(
    text=st.one_of(
        any_text,
        # Long texts with key lines all along: a block of lines repeated.
        st.tuples(
            st.lists(
                st.sampled_from(["ok", "ERROR x", "fail", "é error", ""]), max_size=9
            ),
            st.integers(1, 60),
        ).map(lambda block: "\n".join(block[0] * block[1])),
    ),
    edge=st.integers(1, 400),
    cuts=st.lists(st.integers(1, 1000), max_size=6),
    max_key_lines=st.integers(1, 3),
)
def test_an_edge_keeps_every_candidate_near_either_end_and_the_middles_ends(
    text: str, edge: int, cuts: list[int], max_key_lines: int
) -> None:
    policy = SpillPolicy(max_key_lines=max_key_lines)
    data = text.encode()
    scanner = KeyLineScanner(policy, back_window=7, edge=edge)
    position = 0
    for cut in cuts:
        scanner.feed(data[position : position + cut])
        position += cut
    scanner.feed(data[position:])
    got = scanner.result()
    every = reference_key_lines(text, SpillPolicy(max_key_lines=1000))
    starts = _line_starts(data)
    near = {
        n for n, _ in every if starts[n - 1] < edge or starts[n - 1] >= len(data) - edge
    }
    middle = [line for line in every if line[0] not in near]
    cap = 2 * max_key_lines
    needed = {line for line in every if line[0] in near} | set(
        middle[:cap] + middle[-cap:]
    )
    assert needed <= set(got) <= set(every)
    assert list(got) == sorted(set(got))
