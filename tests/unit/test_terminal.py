"""Terminal noise: escape sequences and overwritten progress lines (S1.4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.summary import summarize, visible
from spillvault.domain.terminal import clean_terminal

ESC = "\x1b"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        # SGR colours and styles, as pytest --color=yes writes them
        ("\x1b[32mPASSED\x1b[0m\x1b[32m [ 50%]\x1b[0m", "PASSED [ 50%]"),
        ("\x1b[1m\x1b[31mFAILED\x1b[0m tests/x.py", "FAILED tests/x.py"),
        ("\x1b[38;5;208morange\x1b[39m", "orange"),
        ("\x1b[38:2::255:0:0mrgb\x1b[m", "rgb"),
        # cursor moves, erasing, private modes
        ("\x1b[2K\x1b[1Gdone", "done"),
        ("a\x1b[3Ab\x1b[10;20Hc", "abc"),
        ("\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),
        # OSC 8 hyperlinks and titles, ended by BEL or by ST
        ("\x1b]8;;https://x.test/a\x07link\x1b]8;;\x07 text", "link text"),
        ("\x1b]8;id=1;file:///tmp/f\x1b\\f\x1b]8;;\x1b\\!", "f!"),
        ("\x1b]0;window title\x07prompt$ ", "prompt$ "),
        # DCS, and other ESC sequences: charsets, keypad, save/restore cursor
        ("\x1bP1$r0m\x1b\\after", "after"),
        ("\x1b(Bplain\x1b)0", "plain"),
        ("\x1b=\x1b7saved\x1b8\x1b>", "saved"),
        # an unfinished sequence, a stray ESC
        ("cut at \x1b[3", "cut at 3"),
        ("stray \x1b", "stray "),
        ("an \x1b]8;;unterminated link\nnext", "an \nnext"),
        # carriage returns: the last state of a line; CRLF is a line end
        ("10%\r50%\r100%\n", "100%\n"),
        ("a\r\nb\r\n", "a\nb\n"),
        ("progress 1/3\rprogress 3/3\r\ndone\n", "progress 3/3\ndone\n"),
        ("abc\r\r\n", "abc\n"),
        ("tail end\r", "tail end"),
        ("x\r\r\ry", "y"),
        ("\r\r\r\n\r\n", "\n\n"),
        ("\x1b[2K\r  50%\x1b[2K\r 100% done\n", " 100% done\n"),
        # nothing to clean
        ("", ""),
        ("plain text\nwith lines\n", "plain text\nwith lines\n"),
    ],
)
def test_cleaning_shows_what_a_terminal_would(raw: str, shown: str) -> None:
    assert clean_terminal(raw) == shown


def test_text_without_escapes_or_carriage_returns_is_returned_as_is() -> None:
    text = "no noise here\n" * 100
    assert clean_terminal(text) is text


def test_each_line_is_cleaned_on_its_own() -> None:
    raw = "one\r1\n\x1b[31mtwo\x1b[0m\nthree 10%\rthree 99%\r\nfour"
    cleaned = clean_terminal(raw)
    assert cleaned.split("\n") == ["1", "two", "three 99%", "four"]
    assert [clean_terminal(line) for line in raw.split("\n")] == cleaned.split("\n")


noise = st.lists(
    st.one_of(
        st.sampled_from(
            [
                ESC,
                "\r",
                "\n",
                "\r\n",
                "\x07",
                "[",
                "]",
                "\\",
                ";",
                "0",
                "31m",
                "\x1b[",
                "\x1b]",
                "\x1b\\",
                "\x1bP",
                "\x1b(",
                "\x1b[1;31m",
                "\x1b]8;;u\x07",
                " 50%",
                "é",
                "字",
            ]
        ),
        st.text(max_size=6),
    ),
    max_size=40,
).map("".join)


@given(noise)
def test_property_cleaning_never_lengthens(text: str) -> None:
    assert len(clean_terminal(text)) <= len(text)


@given(noise)
def test_property_cleaning_is_idempotent(text: str) -> None:
    once = clean_terminal(text)
    assert clean_terminal(once) == once


@given(noise)
def test_property_cleaning_leaves_no_esc_and_no_cr(text: str) -> None:
    cleaned = clean_terminal(text)
    assert ESC not in cleaned
    assert "\r" not in cleaned


@given(noise)
def test_property_cleaning_keeps_every_newline(text: str) -> None:
    assert clean_terminal(text).count("\n") == text.count("\n")


@given(noise)
def test_property_cleaning_works_line_by_line(text: str) -> None:
    # So line N of a preview is line N of the artifact, cleaned.
    lines = text.split("\n")
    assert clean_terminal(text).split("\n") == [clean_terminal(x) for x in lines]


def test_a_summary_shows_the_first_line_as_a_terminal_would() -> None:
    colored = "\x1b[32mok\x1b[0m step 1\n\x1b[31mFAILED\x1b[0m\n"
    assert (
        summarize("\x1b[32mok\x1b[0m step 1", 2, 20) == "ok step 1 (2 lines, 20 bytes)"
    )
    assert visible("10%\r100% done\x1b[K") == "100% done"
    assert visible(colored.split("\n")[1]) == "FAILED"
