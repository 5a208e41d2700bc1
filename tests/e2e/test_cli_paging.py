"""`spillvault read` and `grep` pages: exact bytes, whole characters, GNU -C."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.cli.paging import byte_page, line_page
from spillvault.adapters.harness.capping import cap_line
from spillvault.adapters.session import open_session

if TYPE_CHECKING:
    from collections.abc import Callable

SCRIPT = str(Path(sys.executable).parent / "spillvault")
GNU_GREP = shutil.which("grep")
# Every code point UTF-8 can carry (no surrogates): ASCII, two-, three- and
# four-byte (astral) characters alike.
TEXT = st.text(st.characters(codec="utf-8"), max_size=60)
MULTIBYTE = st.text(st.sampled_from("aé€😀\n\u0301"), max_size=40)


def spill(session_dir: Path, data: bytes) -> str:
    """Store `data` verbatim as a sealed artifact of the session; return its handle."""
    with open_session(session_dir) as session:
        stream = session.externalizer.open_stream("bash")
        stream.write(data)
        stream.close()
        return stream.handle


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run the CLI in this process; return what it printed (it must succeed)."""
    assert cli_main(list(args)) in {0, 1}, capsys.readouterr().err
    return capsys.readouterr().out


def json_page(
    capsys: pytest.CaptureFixture[str], session: Path, handle: str, *flags: str
) -> dict[str, Any]:
    out = run(capsys, "read", handle, "--session", str(session), "--json", *flags)
    data: dict[str, Any] = json.loads(out)
    return data


# byte pages -----------------------------------------------------------------


def test_byte_pages_followed_to_the_end_are_the_artifact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    count = itertools.count()

    @settings(max_examples=60)
    @given(text=TEXT | MULTIBYTE, widths=st.lists(st.integers(1, 9), min_size=1))
    def pages_join_back(text: str, widths: list[int]) -> None:
        data = text.encode()
        handle = spill(session, data)
        joined = b""
        for page_number in count:
            width = widths[page_number % len(widths)]
            start = len(joined)
            page = json_page(
                capsys, session, handle, "--bytes", f"{start}:{start + width}", "--raw"
            )
            piece = base64.b64decode(page["bytes_base64"])
            piece.decode("utf-8")  # strict: no character split by the page edge
            assert (page["start"], page["requested_start"]) == (start, start)
            assert page["end"] == start + len(piece)
            assert page["size_bytes"] == len(data)
            assert len(piece) <= max(width, 4)  # one whole character at least
            joined += piece
            if page["next_byte"] is None:
                break
            assert page["next_byte"] == page["end"] > start
        assert joined == data
        assert page["end"] == len(data)

    pages_join_back()


def follow(data: bytes, widths: list[int], budget: int) -> list[bytes]:
    """Return the pages of `data` from byte 0, each as wide as the next width."""
    pages: list[bytes] = []
    widths_cycle = itertools.cycle(widths)
    position: int | None = 0
    while position is not None:
        width = next(widths_cycle)
        page = byte_page(read_of(data), position, position + width, budget=budget)
        assert page.start == position
        pages.append(page.data)
        assert page.next_byte is None or page.next_byte == page.end > position
        position = page.next_byte
    return pages


def read_of(data: bytes) -> Callable[[int, int], bytes]:
    """Return a reader of `data` as `read_artifact_bytes` reads an artifact."""
    return lambda start, end: data[start:end]


@settings(max_examples=300)
@given(
    data=st.binary(max_size=64) | TEXT.map(str.encode),
    widths=st.lists(st.integers(1, 9), min_size=1),
    budget=st.integers(1, 9),
)
def test_pages_under_any_budget_join_back_even_for_bytes_that_are_not_text(
    data: bytes, widths: list[int], budget: int
) -> None:
    pages = follow(data, widths, budget)
    assert b"".join(pages) == data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return
    for page in pages:
        page.decode("utf-8")  # text is cut on characters only


@settings(max_examples=300)
@given(text=TEXT | MULTIBYTE, start=st.integers(0, 250), width=st.integers(0, 9))
def test_a_start_inside_a_character_moves_back_to_its_first_byte(
    text: str, start: int, width: int
) -> None:
    data = text.encode()
    page = byte_page(read_of(data), start, start + width, budget=100)
    assert page.requested_start == start
    assert page.data == data[page.start : page.end]
    if start >= len(data):
        assert (page.start, page.data, page.next_byte) == (start, b"", None)
        return
    # The page starts on a character: decoding the bytes before it loses nothing.
    data[: page.start].decode("utf-8")
    assert start - 3 <= page.start <= start
    # It moved exactly when START fell on a continuation byte, inside a character.
    assert (page.start != start) == (0x80 <= data[start] <= 0xBF)
    page.data.decode("utf-8")
    assert (page.next_byte is None) == (page.end == len(data))


def test_byte_page_text_says_where_it_starts_and_where_the_next_one_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    handle = spill(session, "ab😀cd".encode())  # the emoji is bytes 2-5
    at = ["--session", str(session)]
    assert run(capsys, "read", handle, *at, "--bytes", "0:4") == (
        "ab\n[next: --bytes 2:4]\n"  # ends before the emoji, not inside it
    )
    assert run(capsys, "read", handle, *at, "--bytes", "2:3") == (
        "😀\n[next: --bytes 6:7]\n"  # narrower than a character: one whole one
    )
    assert run(capsys, "read", handle, *at, "--bytes", "4:8") == (
        "[from byte 2: byte 4 is inside the character that starts there]\n😀cd\n"
    )
    assert json_page(capsys, session, handle, "--bytes", "4:7") == {
        "bytes_base64": base64.b64encode("😀c".encode()).decode(),
        "start": 2,
        "requested_start": 4,
        "end": 7,
        "size_bytes": 8,
        "next_byte": 7,
    }
    assert run(capsys, "read", handle, *at, "--bytes", "8:20") == (
        "[end of the artifact: no bytes from byte 8]\n"
    )
    broken = spill(session, b"a\xffb\xe2\x82")  # invalid, and cut short at the end
    assert run(capsys, "read", broken, *at, "--bytes", "0:9") == "a\ufffdb\ufffd\n"


def cli_bytes(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, check=False, timeout=120
    )


def test_raw_writes_exactly_the_bytes_asked_for(tmp_path: Path) -> None:
    session = tmp_path / "s"
    # Over a MiB (several reads of a chunk), not text, a character on every edge.
    data = (b"\xff\x00caf\xc3\xa9 \xf0\x9f\x98\x80\n" * 90000)[:1_300_001]
    handle = spill(session, data)
    at = ["--session", str(session)]
    for start, end in [(0, len(data)), (1, 7), (9, 10), (1_048_570, 1_300_100)]:
        done = cli_bytes("read", handle, *at, "--bytes", f"{start}:{end}", "--raw")
        assert done.returncode == 0, done.stderr
        assert done.stdout == data[start:end]  # no newline, no marker, no moving
    past = cli_bytes("read", handle, *at, "--bytes", "2000000:2000001", "--raw")
    assert (past.returncode, past.stdout) == (0, b"")


def test_raw_json_byte_pages_carry_the_stored_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    secret = b"ghp_4Rk9Xz2Lq7Vt3Nb8Mw1Pz6Yc0Hf5Gj2KsD8aE"
    handle = spill(session, b"token " + secret + b"\n")
    masked = json_page(capsys, session, handle, "--bytes", "0:100")
    assert secret not in base64.b64decode(masked["bytes_base64"])
    raw = json_page(capsys, session, handle, "--bytes", "0:100", "--raw")
    assert base64.b64decode(raw["bytes_base64"]) == b"token " + secret + b"\n"


# line pages -----------------------------------------------------------------


def test_line_pages_say_where_the_next_starts_and_null_only_at_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    handle = spill(session, "".join(f"line {i}\n" for i in range(1, 21)).encode())
    at = ["--session", str(session)]
    first = json_page(capsys, session, handle, "--line", "1", "--limit", "5")
    assert first == {
        "text": "line 1\nline 2\nline 3\nline 4\nline 5",
        "start_line": 1,
        "lines": 5,
        "total_lines": 20,
        "eof": False,
        "next_start_line": 6,  # more follows, though the budget cut nothing
    }
    last = json_page(capsys, session, handle, "--line", "18", "--limit", "5")
    assert (last["lines"], last["eof"], last["next_start_line"]) == (3, True, None)
    exact = json_page(capsys, session, handle, "--line", "16", "--limit", "5")
    assert (exact["lines"], exact["eof"], exact["next_start_line"]) == (5, True, None)
    assert run(capsys, "read", handle, *at, "--line", "4", "--limit", "2") == (
        "line 4\nline 5\n[more: --line 6 --limit 2]\n"
    )
    assert run(capsys, "read", handle, *at, "--line", "19", "--limit", "2") == (
        "line 19\nline 20\n"
    )
    assert run(capsys, "read", handle, *at, "--line", "25") == (
        "[no line 25: the artifact has 20 lines]\n"
    )
    lines, start = [], 1
    while start is not None:
        page = json_page(capsys, session, handle, "--line", str(start), "--limit", "3")
        lines.extend(page["text"].split("\n"))
        start = page["next_start_line"]
    assert lines == [f"line {i}" for i in range(1, 21)]


@pytest.mark.parametrize("data", [b"a\n\nb\n", b"a\n\nb", b"\n", b"", b"x\n" * 7])
def test_an_open_artifact_pages_like_its_sealed_self(
    tmp_path: Path, data: bytes
) -> None:
    with open_session(tmp_path / "s") as session:
        ext = session.externalizer
        stream = ext.open_stream("bash")
        stream.write(data)
        pages = []
        for first, limit in itertools.product(range(1, 10), range(4)):
            page = line_page(ext, stream.handle, first, limit, budget=1000)
            pages.append((page.text, page.lines, page.next_start_line))
        assert line_page(ext, stream.handle, 1, 1, budget=1000).total_lines is None
        stream.close()
        for (first, limit), seen in zip(
            itertools.product(range(1, 10), range(4)), pages, strict=True
        ):
            page = line_page(ext, stream.handle, first, limit, budget=1000)
            assert (page.text, page.lines, page.next_start_line) == seen, (first, limit)


def test_long_lines_are_cut_with_the_exact_count_in_text_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    handle = spill(session, ("short\n" + "x" * 5000 + "\n" + "é" * 2001).encode())
    at = ["--session", str(session)]
    cut_x = "x" * 2000 + " … [line cut: 3000 more characters]"
    cut_e = "é" * 2000 + " … [line cut: 1 more characters]"
    assert run(capsys, "read", handle, *at) == f"short\n{cut_x}\n{cut_e}\n"
    assert json_page(capsys, session, handle)["text"] == f"short\n{cut_x}\n{cut_e}"
    assert run(capsys, "grep", handle, "xx", *at) == f"2:{cut_x}\n"
    found = json.loads(run(capsys, "grep", handle, "xx", *at, "-C", "1", "--json"))
    (match,) = found["matches"]
    assert (match["line"], match["before"], match["after"]) == (
        cut_x,
        ["short"],
        [cut_e],
    )


def test_a_line_cut_never_splits_a_cluster_and_counts_what_it_hides() -> None:
    line = "x" * 1999 + "👩\u200d💻" + "y" * 10  # the cut at 2000 is in the cluster
    assert cap_line(line, 2000) == "x" * 1999 + " … [line cut: 13 more characters]"
    assert cap_line("x" * 2000, 2000) == "x" * 2000


# grep -----------------------------------------------------------------------


def test_grep_json_and_text_resume_at_the_same_1_based_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"
    handle = spill(session, "".join(f"{i % 3} row {i}\n" for i in range(30)).encode())
    at = ["--session", str(session)]
    seen: list[int] = []
    start = 1
    while True:
        flags = [*at, "--max", "4", "--from", str(start)]
        page = json.loads(run(capsys, "grep", handle, "0 row", *flags, "--json"))
        text = run(capsys, "grep", handle, "0 row", *flags)
        seen.extend(m["line_number"] for m in page["matches"])
        resume = page["next_start_line"]
        if resume is None:
            assert page["resume_from"] is None
            assert "continue with" not in text
            break
        assert page["resume_from"] == resume - 1  # 0-based, kept for compatibility
        assert text.endswith(f"[stopped at --max 4: continue with --from {resume}]\n")
        start = resume
    assert seen == list(range(1, 31, 3))


def gnu_grep(path: Path, pattern: str, context: int | None) -> str:
    """Return what GNU `grep -n -F` prints, with -C when `context` is given."""
    assert GNU_GREP is not None
    flags = [] if context is None else ["-C", str(context)]
    done = subprocess.run(
        [GNU_GREP, "-n", "-F", *flags, "-e", pattern, "--", str(path)],
        capture_output=True,
        check=False,
        env={**os.environ, "LC_ALL": "C"},  # every byte a character, none binary
        timeout=60,
    )
    assert done.returncode in {0, 1}, done.stderr
    return done.stdout.decode()


def compare_with_gnu(
    capsys: pytest.CaptureFixture[str],
    session: Path,
    text: str,
    pattern: str,
    context: int | None,
) -> None:
    data = text.encode()
    handle = spill(session, data)
    path = session.parent / "input.txt"
    path.write_bytes(data)
    expected = gnu_grep(path, pattern, context)
    flags = [] if context is None else ["-C", str(context)]
    got = run(capsys, "grep", handle, pattern, "--session", str(session), *flags)
    assert got == (expected or "no match\n"), (text, pattern, context)


LINES = "".join(
    f"{'hit' if i in {1, 4, 6, 12, 13, 20} else 'miss'} {i}\n" for i in range(1, 21)
)


@pytest.mark.skipif(GNU_GREP is None, reason="needs GNU grep")
@pytest.mark.parametrize(
    ("text", "pattern", "context"),
    [
        (LINES, "hit", 2),  # first and last line; windows overlap; ends clipped
        (LINES, "hit", 1),  # 4 and 6 share line 5; 12 and 13 touch
        (LINES, "hit", 0),  # -C 0: groups parted by --, as GNU does
        (LINES, "hit", None),  # no -C: no separators at all
        (LINES, "hit", 9),  # everything one group
        ("a\nb\nc\nd\na\nb\nc\nd", "a", 1),  # no final newline; adjacent windows
        ("x\n\n\nx\n\n\n\nx\n", "x", 2),  # empty lines, windows that touch
        ("héllo 😀\nplain\n\r\nnaïve 😀 end\n", "😀", 1),  # multibyte, a CR
        ("one\ntwo\n", "zzz", 1),  # no match at all
    ],
)
def test_grep_context_lays_out_groups_exactly_as_gnu_grep(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    pattern: str,
    context: int | None,
) -> None:
    compare_with_gnu(capsys, tmp_path / "s", text, pattern, context)


@pytest.mark.skipif(GNU_GREP is None, reason="needs GNU grep")
def test_grep_context_matches_gnu_grep_on_random_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s"

    @settings(max_examples=60)
    @given(
        lines=st.lists(
            st.sampled_from(["a", "b", "ab", "", "é a", "xyz"]), max_size=25
        ),
        final_newline=st.booleans(),
        pattern=st.sampled_from(["a", "b", "xyz"]),
        context=st.none() | st.integers(0, 4),
    )
    def same_as_gnu(
        lines: list[str], final_newline: bool, pattern: str, context: int | None
    ) -> None:
        text = "\n".join(lines) + ("\n" if final_newline and lines else "")
        compare_with_gnu(capsys, session, text, pattern, context)

    same_as_gnu()
