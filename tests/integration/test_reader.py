"""Page faults: verified, page-sized reads and grep (S2.4, S2.5, S3.1-S3.5, A4).

Every result is compared with a naive reference: decode the whole artifact with
errors="replace", split on "\\n", slice. Multi-chunk behaviour uses real 1 MiB
chunks (no monkeypatching of CHUNK_SIZE).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillvault.adapters.services.reader import (
    _REGEX_WORKER,
    ArtifactReader,
    RegexTimeoutError,
    _first_occurrence,
    regex_matching_lines,
)
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.artifact_store import FileBlob, LocalArtifactStore
from spillvault.domain.artifact import Artifact, ArtifactContent
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import ArtifactAccessError, ArtifactIntegrityError
from spillvault.domain.reading import GrepMatch

from support.dates import fixed
from support.intercept import InterceptingFS
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session

    from support.intercept import Call

MiB = CHUNK_SIZE
AT = fixed(2026)


# naive references -------------------------------------------------------------


def ref_lines(data: bytes) -> list[str]:
    return data.decode("utf-8", errors="replace").split("\n")


def ref_read(data: bytes, offset: int, limit: int) -> str:
    return "\n".join(ref_lines(data)[offset : offset + limit])


def ref_grep(
    data: bytes, pattern: str, *, context: int = 0, offset: int = 0, regex: bool = False
) -> list[GrepMatch]:
    lines = ref_lines(data)
    found = []
    for i in range(offset, len(lines)):
        hit = re.search(pattern, lines[i]) if regex else pattern in lines[i]
        if hit:
            before = tuple(lines[max(0, i - context) : i])
            after = tuple(lines[i + 1 : i + 1 + context])
            found.append(GrepMatch(i + 1, lines[i], before, after))
    return found


def check_grep(reader: ArtifactReader, handle: str, data: bytes, pattern: str, **kw):
    max_matches = kw.pop("max_matches", 100)
    result = reader.grep_artifact(handle, pattern, max_matches=max_matches, **kw)
    kw.pop("regex_timeout", None)
    expected = ref_grep(data, pattern, **kw)
    assert list(result.matches) == expected[:max_matches]
    assert result.truncated == (len(expected) > max_matches)
    if result.truncated:
        assert result.resume_from == expected[max_matches].line_number - 1
    else:
        assert result.resume_from is None
    return result


# fixtures ---------------------------------------------------------------------


class Env:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.store = LocalArtifactStore(session)
        self.reader = ArtifactReader(session, self.store, regex_timeout=5.0)

    def put(self, data: bytes) -> str:
        """Store `data`; return its absolute path, an alias of its handle."""
        pieces = [data[i : i + 3 * MiB + 7] for i in range(0, len(data), 3 * MiB + 7)]
        artifact = self.store.store(pieces, source_tool="bash")
        return str(self.store.reference_for(artifact).path)

    def close(self) -> None:
        self.store.close()
        self.session.close()


@contextmanager
def make_env(directory: Path, **kwargs: Any) -> Iterator[Env]:
    env = Env(open_session(directory, **kwargs))
    try:
        yield env
    finally:
        env.close()


@pytest.fixture
def env(session_dir: Path) -> Iterator[Env]:
    with make_env(session_dir) as value:
        yield value


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One session for the property tests (many small artifacts)."""
    with make_env(tmp_path_factory.mktemp("prop") / "session-p") as value:
        yield value


def big_content() -> bytes:
    """~3.6 MiB over 4 chunks: CRLF, U+2028, NUL, invalid UTF-8, a >1 MiB line,
    lines and needles straddling chunk boundaries, no trailing newline."""
    out = bytearray()
    n = 0
    while len(out) < MiB - 40:
        out += b"%07d INFO worker=%d status=ok\r\n" % (n, n % 7)
        n += 1
    out += b"x" * (MiB - 5 - len(out)) + b"NEED|LE-across\n"  # needle spans 0|1
    while len(out) < int(1.3 * MiB):
        out += b"%07d caf\xc3\xa9 \xe2\x80\xa8 sep\x00nul \xe2\x82 bad \xff\n" % n
        n += 1
    out += b"L" * (MiB + MiB // 2) + b" NEED|LE-in-long-line\n"  # crosses 1|2|3
    while len(out) < 2 * MiB + 10:
        out += b"%07d tail line\n" % n
        n += 1
    while len(out) < 3 * MiB + MiB // 2:
        out += b"%07d DEBUG retry \xe2\x82\xac price NEED|LE=%d\n" % (n, n % 3)
        n += 1
    out += b"last line without newline \xf0\x9f\x98"
    return bytes(out)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, str, bytes]]:
    data = big_content()
    assert len(data) > 3 * MiB
    with make_env(tmp_path_factory.mktemp("big") / "session-b") as value:
        yield value, value.put(data), data


# content strategy ---------------------------------------------------------------

PIECES = [
    b"\n", b"\r\n", b"\r", "\u2028".encode(), "\u2029".encode(), "\u0085".encode(),
    b"\x00", b"\xff", b"\xe2\x82", b"\xc3", b"\xed\xa0\x80", "é".encode(),
    "€".encode(), "😀".encode(), b"a", b"ab", b"abc", b"b", b" ", b"x" * 300,
    "\ufffd".encode(),
]  # fmt: skip

contents = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join),
    st.binary(max_size=300),
    st.text(max_size=120).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
patterns = st.sampled_from(
    ["a", "ab", "abc", "b", "é", "€", "😀", "\r", "\u2028", "\x00", "\ufffd", "a\r",
     "", " ", "x" * 10, "a\nb", "\u0085", "zzz", "\ud800", "\udcff"]
)  # fmt: skip


# reading ----------------------------------------------------------------------


@settings(max_examples=150)
@given(data=contents, offset=st.integers(0, 40), limit=st.integers(0, 40))
def test_read_round_trips_against_the_naive_reader(
    shared: Env, data: bytes, offset: int, limit: int
) -> None:
    handle = shared.put(data)
    assert shared.reader.read_artifact(handle, offset, limit) == ref_read(
        data, offset, limit
    )
    assert shared.reader.read_artifact(handle) == ref_read(data, 0, 2000)
    assert shared.reader.read_from_disk(handle, offset, limit) == ref_read(
        data, offset, limit
    )


@settings(max_examples=60)
@given(data=contents, bounds=st.tuples(st.integers(0, 400), st.integers(0, 400)))
def test_read_bytes_is_exact(shared: Env, data: bytes, bounds: tuple[int, int]) -> None:
    handle = shared.put(data)
    start, end = sorted(bounds)
    assert shared.reader.read_artifact_bytes(handle, start, end) == data[start:end]
    assert shared.reader.read_artifact_bytes(handle, 0, len(data)) == data


def test_read_splits_on_newline_only_and_keeps_bytes_verbatim(env: Env) -> None:
    data = b"a\r\nb\xe2\x80\xa8c\xc2\x85d\x00e\xff\n\nlast"
    handle = env.put(data)
    assert env.reader.read_artifact(handle, 0, 1) == "a\r"
    assert env.reader.read_artifact(handle, 1, 1) == "b\u2028c\u0085d\x00e\ufffd"
    assert env.reader.read_artifact(handle, 2, 5) == "\nlast"
    assert env.reader.read_artifact(handle, 4, 1) == ""
    assert env.reader.read_artifact_bytes(handle, 0, 10**9) == data


def test_empty_artifact_and_trailing_newline(env: Env) -> None:
    empty = env.put(b"")
    assert env.reader.read_artifact(empty) == ""
    assert env.reader.read_artifact_bytes(empty, 0, 5) == b""
    assert env.reader.grep_artifact(empty, "").matches == (GrepMatch(1, ""),)
    trailing = env.put(b"one\ntwo\n")
    assert env.reader.read_artifact(trailing, 1, 5) == "two\n"
    assert env.reader.read_artifact(trailing, 2, 5) == ""


@pytest.mark.parametrize("name", ["offset", "limit"])
def test_negative_offset_or_limit_is_refused(env: Env, name: str) -> None:
    handle = env.put(b"a\nb\n")
    kwargs = {"offset": 0, "limit": 1, name: -1}
    with pytest.raises(ValueError, match=f"{name} must be >= 0"):
        env.reader.read_artifact(handle, **kwargs)
    with pytest.raises(ValueError, match=f"{name} must be >= 0"):
        env.reader.read_from_disk(handle, **kwargs)


def test_read_bytes_validates_its_range(env: Env) -> None:
    handle = env.put(b"abcdef")
    with pytest.raises(ValueError, match="start must be >= 0"):
        env.reader.read_artifact_bytes(handle, -1, 2)
    with pytest.raises(ValueError, match="end must be >= start"):
        env.reader.read_artifact_bytes(handle, 4, 2)
    assert env.reader.read_artifact_bytes(handle, 2, 4) == b"cd"


def test_multi_chunk_reads_match_the_reference(big: tuple[Env, str, bytes]) -> None:
    env, handle, data = big
    lines = ref_lines(data)
    total = len(lines)
    long_line = next(i for i, line in enumerate(lines) if len(line) > MiB)
    for offset, limit in [
        (0, 2000), (0, total), (total - 3, 10), (total, 5), (long_line - 1, 3),
        (long_line, 1), (long_line + 1, 2), (30000, 4000), (total - 1, 1),
    ]:  # fmt: skip
        assert env.reader.read_artifact(handle, offset, limit) == ref_read(
            data, offset, limit
        ), (offset, limit)
    for start, end in [
        (0, len(data)), (MiB - 10, MiB + 10), (2 * MiB - 1, 3 * MiB + 1),
        (3 * MiB, len(data) + 99), (MiB, MiB),
    ]:  # fmt: skip
        assert env.reader.read_artifact_bytes(handle, start, end) == data[start:end]


def test_offset_beyond_the_end_reads_nothing(env: Env) -> None:
    handle = env.put(b"a\nb")
    assert env.reader.read_artifact(handle, 2, 10) == ""
    assert env.reader.read_artifact(handle, 10**9, 10) == ""


# grep -------------------------------------------------------------------------


@settings(max_examples=150)
@given(
    data=contents,
    pattern=patterns,
    context=st.integers(0, 3),
    max_matches=st.integers(0, 6),
    offset=st.integers(0, 8),
)
def test_literal_grep_matches_the_reference(  # noqa: PLR0917 - Hypothesis arguments
    shared: Env, data: bytes, pattern: str, context: int, max_matches: int, offset: int
) -> None:
    handle = shared.put(data)
    check_grep(
        shared.reader,
        handle,
        data,
        pattern,
        context=context,
        max_matches=max_matches,
        offset=offset,
    )


@settings(max_examples=60)
@given(data=contents, pattern=patterns, max_matches=st.integers(1, 3))
def test_resume_from_continues_to_the_same_total(
    shared: Env, data: bytes, pattern: str, max_matches: int
) -> None:
    handle = shared.put(data)
    whole = shared.reader.grep_artifact(handle, pattern, context=1, max_matches=10**6)
    assert not whole.truncated
    collected: list[GrepMatch] = []
    offset = 0
    while True:
        page = shared.reader.grep_artifact(
            handle, pattern, context=1, max_matches=max_matches, offset=offset
        )
        collected.extend(page.matches)
        if not page.truncated:
            break
        assert page.resume_from is not None
        assert page.resume_from > offset or not collected
        offset = page.resume_from
    assert collected == list(whole.matches)


def test_grep_line_numbers_are_one_based_with_context(env: Env) -> None:
    handle = env.put(b"zero\nERROR one\ntwo\nthree\nERROR four\n")
    result = env.reader.grep_artifact(handle, "ERROR", context=1)
    assert result.matches == (
        GrepMatch(2, "ERROR one", ("zero",), ("two",)),
        GrepMatch(5, "ERROR four", ("three",), ("",)),
    )
    # "line N" is read with offset=N-1
    assert env.reader.read_artifact(handle, result.matches[1].line_number - 1, 1) == (
        "ERROR four"
    )


def test_grep_truncates_with_a_resume_point(env: Env) -> None:
    handle = env.put(b"".join(b"hit %d\nmiss\n" % i for i in range(10)))
    result = env.reader.grep_artifact(handle, "hit", max_matches=3)
    assert [m.line_number for m in result.matches] == [1, 3, 5]
    assert result.truncated
    assert result.resume_from == 6
    rest = env.reader.grep_artifact(handle, "hit", max_matches=100, offset=6)
    assert [m.line_number for m in rest.matches] == [7, 9, 11, 13, 15, 17, 19]
    assert not rest.truncated


def test_grep_on_replaced_bytes_matches_decoded_text_only(env: Env) -> None:
    data = b"ok\nx\xed\xa0\x80y\nbad \xe2\x82\nreal \xef\xbf\xbd\n"
    handle = env.put(data)
    for pattern in ["\ud800", "\ud800\udc00", "\ufffd", "\ufffd\ufffd\ufffd", "\ufffdy",
                    "bad \ufffd", "real \ufffd", "y"]:  # fmt: skip
        check_grep(env.reader, handle, data, pattern, context=1)
    assert env.reader.grep_artifact(handle, "\ud800").matches == ()
    assert [
        m.line_number for m in env.reader.grep_artifact(handle, "\ufffd").matches
    ] == [2, 3, 4]


@pytest.mark.parametrize(
    "pattern",
    ["NEED|LE", "NEED|LE-across", "NEED|LE-in-long-line", "|LE=2", "\r", "caf\u00e9",
     "\u2028 sep\x00", "\ufffd bad", "\u20ac price", "without newline \ufffd",
     "0000007 INFO", "absent-needle", "L" * 5000, "x" * 6000 + "NEED"],
)  # fmt: skip
def test_grep_across_chunks_matches_the_reference(
    big: tuple[Env, str, bytes], pattern: str
) -> None:
    env, handle, data = big
    check_grep(env.reader, handle, data, pattern, context=2, max_matches=40)
    check_grep(env.reader, handle, data, pattern, max_matches=10**6)


def test_grep_with_offset_in_a_later_chunk(big: tuple[Env, str, bytes]) -> None:
    env, handle, data = big
    offset = len(ref_lines(data)) - 500
    check_grep(env.reader, handle, data, "NEED|LE", offset=offset, context=3)


def _filler(size: int) -> bytearray:
    """`size` bytes of numbered lines, the needles of the tests below absent."""
    line = b"%07d filler\n"
    out = bytearray(b"".join(line % i for i in range(size // len(line % 0) + 1)))
    del out[size:]
    return out


@settings(max_examples=30)
@given(
    needle=st.sampled_from(["NEEDLE", "N\x00\x00N", "\u20acuro", "ab" * 60, "Z"]),
    places=st.lists(
        st.tuples(st.integers(1, 2), st.integers(-130, 130)), min_size=1, max_size=5
    ),
    tail=st.integers(0, 200),
    context=st.integers(0, 2),
)
def test_grep_finds_needles_around_chunk_boundaries(
    shared: Env,
    needle: str,
    places: list[tuple[int, int]],
    tail: int,
    context: int,
) -> None:
    """Needles just before, across and just after boundaries, read ahead."""
    data = _filler(2 * MiB + tail)
    encoded = needle.encode()
    for boundary, shift in places:
        at = min(max(boundary * MiB + shift, 0), len(data) - len(encoded))
        data[at : at + len(encoded)] = encoded
    handle = shared.put(bytes(data))
    for pattern in (needle, needle[: len(needle) // 2 + 1]):
        check_grep(shared.reader, handle, bytes(data), pattern, context=context)
        check_grep(shared.reader, handle, bytes(data), pattern, max_matches=2)


@settings(max_examples=200)
@given(
    data=st.binary(max_size=400),
    needle=st.binary(min_size=1, max_size=6),
    copies=st.lists(st.integers(0, 400), max_size=3),
)
def test_the_chunk_search_is_find(
    data: bytes, needle: bytes, copies: list[int]
) -> None:
    """Hyperscan (escaped bytes, NUL included) answers what bytes.find does."""
    for at in copies:
        data = data[:at] + needle + data[at:]
    assert _first_occurrence(needle)(data) == data.find(needle)


@pytest.mark.parametrize("length", [3999, 4000, 4001, 4096])
def test_the_chunk_search_takes_the_longest_needles(length: int) -> None:
    """Past 4000 bytes Hyperscan refuses a needle: bytes.find takes over."""
    needle = bytes(range(256)) * (length // 256) + b"\x00" * (length % 256)
    data = b"x" * 100 + needle[:-1] + b"y" + needle + b"z"
    assert _first_occurrence(needle)(data) == 100 + length
    assert _first_occurrence(needle)(data[:-2]) == -1


def test_grep_pattern_must_be_text(env: Env) -> None:
    handle = env.put(b"abc")
    with pytest.raises(ValueError, match="pattern must be a string"):
        env.reader.grep_artifact(handle, b"abc")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_matches must be >= 0"):
        env.reader.grep_artifact(handle, "a", max_matches=-1)
    with pytest.raises(ValueError, match="context must be >= 0"):
        env.reader.grep_artifact(handle, "a", context=-1)


# regex ------------------------------------------------------------------------

REGEXES = [
    "a",
    "^$",
    "^a",
    "b$",
    "\\r",
    "[\u2028]",
    "\x00",
    "\ufffd",
    "^.{3}$",
    "a+b",
    ".",
]


@settings(max_examples=25)
@given(data=contents, pattern=st.sampled_from(REGEXES), max_matches=st.integers(0, 4))
def test_regex_grep_matches_the_reference(
    shared: Env, data: bytes, pattern: str, max_matches: int
) -> None:
    handle = shared.put(data)
    check_grep(
        shared.reader,
        handle,
        data,
        pattern,
        regex=True,
        context=1,
        max_matches=max_matches,
    )


def test_regex_over_chunks_with_offset(big: tuple[Env, str, bytes]) -> None:
    env, handle, data = big
    check_grep(env.reader, handle, data, r"NEED\|LE=[12]$", regex=True, max_matches=7)
    check_grep(env.reader, handle, data, r"^L+ NEED", regex=True, context=1)
    offset = len(ref_lines(data)) - 50
    check_grep(env.reader, handle, data, r"=0$|out new", regex=True, offset=offset)


def test_invalid_regex_is_a_value_error(env: Env) -> None:
    handle = env.put(b"abc\n")
    with pytest.raises(ValueError, match="invalid regex"):
        env.reader.grep_artifact(handle, "(unclosed", regex=True)


def _regex_workers() -> list[int]:
    """Children of this process that run the regex worker."""
    mine = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat_line = handle.read()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        ppid = stat_line.rsplit(b")", 1)[1].split()[1].decode()
        if ppid == mine and b"rx.search" in cmdline:
            found.append(int(entry))
    return found


def test_catastrophic_regex_is_killed_at_its_wall_clock_limit(session_dir: Path):
    with make_env(session_dir) as env:
        reader = ArtifactReader(env.session, env.store, regex_timeout=1.0)
        handle = env.put(b"a" * 40 + b"b\n")
        started = time.monotonic()
        with pytest.raises(RegexTimeoutError, match="regex timed out") as caught:
            reader.grep_artifact(handle, "(a+)+$", regex=True)
        elapsed = time.monotonic() - started
        assert isinstance(caught.value, TimeoutError)
        # The limit is not cut short; the upper bound only turns a hang into a failure.
        assert 0.9 <= elapsed < HANG_GUARD_SECONDS
        assert _regex_workers() == []
        assert not any(t.name == "spillvault-regex-feed" for t in threading.enumerate())
        # the per-call limit overrides the reader's
        with pytest.raises(RegexTimeoutError):
            env.reader.grep_artifact(handle, "(a+)+$", regex=True, regex_timeout=0.3)


def test_lines_in_memory_are_matched_by_the_same_killable_worker() -> None:
    lines = ["token [REDACTED x]", "ab\nc", "\u00e9t\u00e9 ok", "abc"]
    # A line holding a newline stays one line: the indices do not shift.
    assert regex_matching_lines(r"^a.c$", lines, 5.0) == [3]
    assert regex_matching_lines(r"^c$", lines, 5.0) == []
    assert regex_matching_lines(r"\w+ ok", lines, 5.0) == [2]
    assert regex_matching_lines("x", [], 5.0) == []
    with pytest.raises(ValueError, match="invalid regex"):
        regex_matching_lines("(", lines, 5.0)
    with pytest.raises(RegexTimeoutError, match="regex timed out"):
        regex_matching_lines("(a+)+$", ["a" * 40 + "b"], 0.3)
    assert _regex_workers() == []


def test_regex_timeout_kills_a_worker_still_being_fed(
    big: tuple[Env, str, bytes],
) -> None:
    env, handle, _data = big
    started = time.monotonic()
    with pytest.raises(RegexTimeoutError):
        env.reader.grep_artifact(handle, "(L+L+)+y", regex=True, regex_timeout=0.5)
    assert time.monotonic() - started < HANG_GUARD_SECONDS
    assert _regex_workers() == []


# verification (S3.3) ------------------------------------------------------------


def _chunk_lines(data: bytes) -> list[int]:
    """The 0-based line number of a line wholly inside each chunk."""
    lines = []
    for index in range(-(-len(data) // MiB)):
        middle = index * MiB + MiB // 2
        lines.append(data.count(b"\n", 0, middle) + 1)
    return lines


def _flip_byte(path: str, position: int) -> None:
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(position)
        old = handle.read(1)
        handle.seek(position)
        handle.write(bytes([old[0] ^ 0x01]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns


def _three_chunks() -> bytes:
    line = b"%08d the quick brown fox jumps over the lazy dog\n"
    data = b"".join(line % i for i in range(3 * MiB // len(line % 0) + 1))
    assert 2 * MiB < len(data) < 3 * MiB + 100
    return data[: 3 * MiB - 20] + b"end\n"


def test_a_flipped_byte_fails_only_its_chunk(env: Env) -> None:
    data = _three_chunks()
    handle = env.put(data)
    first, middle, last = _chunk_lines(data)
    _flip_byte(handle, MiB + MiB // 2 + 3)
    with pytest.raises(ArtifactIntegrityError, match="digest mismatch in chunk 1"):
        env.reader.read_artifact(handle, middle, 5)
    with pytest.raises(ArtifactIntegrityError):
        env.reader.read_artifact_bytes(handle, MiB + 5, MiB + 6)
    with pytest.raises(ArtifactIntegrityError):
        env.reader.grep_artifact(handle, "absent")
    with pytest.raises(ArtifactIntegrityError):
        env.reader.grep_artifact(handle, "absent", regex=True)
    with pytest.raises(ArtifactIntegrityError):
        env.reader.read_artifact(handle, 0, 10**9)
    assert env.reader.read_artifact(handle, first, 5) == ref_read(data, first, 5)
    assert env.reader.read_artifact(handle, last, 5) == ref_read(data, last, 5)
    assert env.reader.read_artifact_bytes(handle, 10, 20) == data[10:20]
    # a grep that stops inside the good first chunk needs nothing else
    hit = env.reader.grep_artifact(handle, "0000000", max_matches=3)
    assert [m.line_number for m in hit.matches] == [1, 2, 3]
    assert hit.resume_from == 3
    # a hit inside the bad chunk, or in the good one after it, is never returned
    for line in (middle + 5, last + 5):
        pattern = f"{line:08d} the"
        assert len(check_grep(env.reader, env.put(data), data, pattern).matches) == 1
        with pytest.raises(ArtifactIntegrityError, match="digest mismatch in chunk 1"):
            env.reader.grep_artifact(handle, pattern)


def test_truncated_or_extended_file_is_refused(env: Env) -> None:
    data = _three_chunks()
    shrunk, grown = env.put(data), env.put(data)
    os.truncate(shrunk, len(data) - 1)
    with open(grown, "ab") as handle:
        handle.write(b"more\n")
    for handle in (shrunk, grown):
        with pytest.raises(ArtifactIntegrityError, match="size mismatch"):
            env.reader.read_artifact(handle, 0, 1)
        with pytest.raises(ArtifactIntegrityError, match="size mismatch"):
            env.reader.read_artifact_bytes(handle, 0, 1)
        with pytest.raises(ArtifactIntegrityError, match="size mismatch"):
            env.reader.grep_artifact(handle, "fox")


def test_reference_with_wrong_digest_or_size_is_refused(env: Env) -> None:
    artifact = env.store.store([b"alpha\nbeta\n"], source_tool="bash")
    reference = env.store.reference_for(artifact)
    assert env.reader.read_artifact(reference) == "alpha\nbeta\n"
    assert env.reader.grep_artifact(reference, "beta").matches[0].line_number == 2
    wrong_digest = dataclasses.replace(reference, content_sha256="0" * 64)
    wrong_size = dataclasses.replace(reference, size_bytes=reference.size_bytes + 1)
    for bad in (wrong_digest, wrong_size):
        with pytest.raises(ArtifactIntegrityError, match="mismatch"):
            env.reader.read_artifact(bad)
        with pytest.raises(ArtifactIntegrityError, match="mismatch"):
            env.reader.read_artifact_bytes(bad, 0, 1)
        with pytest.raises(ArtifactIntegrityError, match="mismatch"):
            env.reader.grep_artifact(bad, "beta")


def _record_forged(env: Env, data: bytes, content: ArtifactContent) -> str:
    filename = f"tool_result_{env.session.store.reserve_artifact_number():03d}.txt"
    path = os.path.join(env.store.tool_results_dir, filename)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)
    artifact = Artifact.store(
        filename,
        content,
        source_tool="bash",
        tool_use_id=None,
        is_error=False,
        captured_at=AT,
        summary="forged",
    )
    env.session.store.save_aggregates(artifact)
    return os.path.join(env.store.tool_results_dir, filename)


def test_a_whole_read_also_checks_the_whole_file_digest(env: Env) -> None:
    data = b"y" * (MiB + 10)
    chunks = (data[:MiB], data[MiB:])
    content = ArtifactContent(
        content_sha256="f" * 64,  # inconsistent with the (correct) chunk digests
        size_bytes=len(data),
        line_count=1,
        chunk_sha256=tuple(hashlib.sha256(c).hexdigest() for c in chunks),
        chunk_newlines=(0, 0),
    )
    handle = _record_forged(env, data, content)
    assert env.reader.read_artifact_bytes(handle, 5, MiB + 5) == data[5 : MiB + 5]
    with pytest.raises(ArtifactIntegrityError, match="read whole"):
        env.reader.read_artifact_bytes(handle, 0, len(data))
    with pytest.raises(ArtifactIntegrityError, match="read whole"):
        env.reader.read_artifact(handle)


def test_unreadable_states_are_refused(env: Env) -> None:
    artifact = env.store.store([b"gone\n"], source_tool="bash")
    handle = os.path.join(env.store.tool_results_dir, artifact.filename)
    record = env.session.store.get_artifact(artifact.filename)
    assert record is not None
    os.unlink(handle)
    with pytest.raises(ArtifactIntegrityError, match="missing"):
        env.reader.read_artifact(handle)
    record.mark_lost(detected_at=AT)
    env.session.store.save_aggregates(record)
    with pytest.raises(ArtifactAccessError, match="lost"):
        env.reader.read_artifact(handle)


# open streams and partial artifacts (S2.4) ------------------------------------------


def test_open_stream_is_readable_unverified_then_verified_once_sealed(env: Env) -> None:
    stream = env.store.open_stream("bash")
    stream.write(b"first\nsecond")
    handle = stream.handle
    assert env.reader.is_verified(handle) is False
    assert env.reader.read_artifact(handle) == "first\nsecond"
    assert env.reader.grep_artifact(handle, "sec").matches == (GrepMatch(2, "second"),)
    assert env.reader.grep_artifact(handle, "^f", regex=True).matches[0].line == "first"
    stream.write(b" half\nthird\n")
    assert env.reader.read_artifact(handle, 1, 2) == "second half\nthird"
    stream.close()
    assert env.reader.is_verified(handle) is True
    assert env.reader.read_artifact(handle, 1, 2) == "second half\nthird"


def test_an_open_stream_over_chunks_greps_like_the_reference(env: Env) -> None:
    data = _three_chunks()
    stream = env.store.open_stream("bash")
    stream.write(data)
    for pattern in ("0000000", "lazy dog", "dogend", "absent"):
        check_grep(env.reader, stream.handle, data, pattern, context=1)
    stream.close()


def test_partial_artifact_is_verified(env: Env) -> None:
    stream = env.store.open_stream("bash")
    stream.write(b"began\nthen fail")
    partial = stream.fail()
    assert partial.state == "partial"
    handle = stream.handle
    assert env.reader.is_verified(handle) is True
    assert env.reader.read_artifact(handle, 1) == "then fail"
    assert env.reader.read_artifact(handle, start_line=2) == "then fail"
    _flip_byte(os.path.join(env.store.tool_results_dir, partial.filename), 2)
    with pytest.raises(ArtifactIntegrityError, match="digest mismatch"):
        env.reader.read_artifact(handle)


# confinement (S3.2) and A4 --------------------------------------------------------


def test_hostile_handles_are_refused(env: Env, tmp_path: Path) -> None:
    handle = env.put(b"secret\n")
    tool_results = env.store.tool_results_dir
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"x\n")
    os.symlink(handle, os.path.join(tool_results, "tool_result_900.txt"))
    unrecorded = os.path.join(tool_results, "tool_result_901.txt")
    fd = os.open(unrecorded, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    with make_env(tmp_path / "session-other") as other:
        foreign = other.put(b"other session\n")
    hostile = [
        f"{tool_results}/../session.json",
        f"{tool_results}/../tool-results/{os.path.basename(handle)}",
        f"{tool_results}/./{os.path.basename(handle)}",
        "tool-results/" + os.path.basename(handle),
        os.path.basename(handle),
        str(outside),
        "/etc/passwd",
        handle + "\x00",
        handle.replace("tool_result_", "tool_result_\x00"),
        f"{tool_results}/tool_result_1.txt",
        f"{tool_results}/tool_result_{'1' * 5000}.txt",  # past int()'s 4300 digits
        f"{tool_results}/tool_result_{'1' * 21}.txt",
        f"{tool_results}/tool_result_900.txt",  # a symlink
        unrecorded,  # no event: not an artifact of this session
        foreign,
        f"session-other/{os.path.basename(foreign)[12:-4].lstrip('0')}",
        f"{env.session.session_id}/01",
        f"{env.session.session_id}/1.0",
        f"{env.session.session_id}/999",  # no such artifact
        f"{tool_results}/.tmp-abc",
        "",
        42,
    ]
    for bad in hostile:
        with pytest.raises(ArtifactAccessError):
            env.reader.read_artifact(bad)  # type: ignore[arg-type]
        with pytest.raises(ArtifactAccessError):
            env.reader.read_from_disk(bad)  # type: ignore[arg-type]
        with pytest.raises(ArtifactAccessError):
            env.reader.grep_artifact(bad, "x")  # type: ignore[arg-type]
        with pytest.raises(ArtifactAccessError):
            env.reader.read_artifact_bytes(bad, 0, 1)  # type: ignore[arg-type]
    assert env.reader.read_from_disk(handle) == "secret\n"


def _in_thread(call: Any) -> list[BaseException | object]:
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=HANG_GUARD_SECONDS)  # a blocked read never returns
    assert not thread.is_alive(), "the read blocked"
    return outcome


def test_a_fifo_swapped_in_never_blocks(env: Env) -> None:
    handle = env.put(b"real\n")
    os.unlink(handle)
    os.mkfifo(handle, 0o600)
    for call in (
        lambda: env.reader.read_artifact(handle),
        lambda: env.reader.grep_artifact(handle, "real"),
        lambda: env.reader.grep_artifact(handle, "real", regex=True),
    ):
        (outcome,) = _in_thread(call)
        assert isinstance(outcome, ArtifactAccessError), outcome


class SwapAfterResolve:
    """A store whose file is replaced by a FIFO between resolve and open."""

    def __init__(self, store: LocalArtifactStore) -> None:
        self.store = store

    def resolve(self, handle: str) -> str:
        filename = self.store.resolve(handle)
        os.unlink(handle)
        os.mkfifo(handle, 0o600)
        return filename

    def open_for_read(self, handle: str) -> FileBlob:
        return self.store.open_for_read(handle)

    def confirm(self, filename: str, content: ArtifactContent) -> None:
        self.store.confirm(filename, content)


def test_a_fifo_swapped_in_after_resolve_never_blocks(env: Env) -> None:
    handle = env.put(b"real\n")
    reader = ArtifactReader(env.session, SwapAfterResolve(env.store))
    (outcome,) = _in_thread(lambda: reader.read_artifact(handle))
    assert isinstance(outcome, ArtifactAccessError), outcome
    assert "regular file" in str(outcome)


# cost (S3.4): a page costs the page, not the file -----------------------------------


def preads(fs: InterceptingFS) -> list[tuple[int, int]]:
    """`(offset, bytes read)` of each recorded `pread`."""
    return [(call["offset"], len(call.result)) for call in fs.calls_to("pread")]


@settings(max_examples=25, deadline=None)
@given(
    widths=st.lists(st.integers(0, 300), min_size=1, max_size=6),
    pages=st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 60)), max_size=4),
)
def test_pages_anywhere_in_big_chunks_read_as_the_naive_reader_does(
    shared: Env, widths: list[int], pages: list[tuple[int, int]]
) -> None:
    """Lines are found from either end of their chunk, a block at a time."""
    lines = [b"x" * widths[n % len(widths)] + b"%d" % n for n in range(40_000)]
    data = b"\n".join(lines)[: 2 * MiB + 12_345]
    handle = shared.put(data)
    for offset, limit in pages:
        assert shared.reader.read_artifact(handle, offset, limit) == ref_read(
            data, offset, limit
        )


def test_a_page_near_the_end_reads_only_its_chunks(session_dir: Path) -> None:
    recorder = InterceptingFS(record={"pread"})
    data = _three_chunks() + b"z" * 100 + b"\n" + _three_chunks()[: MiB // 2]
    with make_env(session_dir, fs=recorder) as env:
        handle = env.put(data)
        last_line = len(ref_lines(data)) - 60
        recorder.calls.clear()
        text = env.reader.read_artifact(handle, last_line, 50)
        assert text == ref_read(data, last_line, 50)
        assert preads(recorder), "the page was read through the seam"
        assert min(offset for offset, _ in preads(recorder)) == 3 * MiB
        assert sum(size for _, size in preads(recorder)) == len(data) - 3 * MiB
        # a page straddling a chunk boundary reads exactly the two chunks
        boundary_line = data.count(b"\n", 0, 2 * MiB)
        recorder.calls.clear()
        text = env.reader.read_artifact(handle, boundary_line - 2, 5)
        assert text == ref_read(data, boundary_line - 2, 5)
        # ... in one read: the recorded newline counts say which chunks
        # before a byte is read (an object store then sends one ranged GET)
        assert preads(recorder) == [(1 * MiB, 2 * MiB)]
        # nothing is cached across calls: a repeated read reads again
        recorder.calls.clear()
        env.reader.read_artifact(handle, last_line, 50)
        assert sum(size for _, size in preads(recorder)) == len(data) - 3 * MiB


def test_a_file_that_shrinks_while_read_is_refused(session_dir: Path) -> None:
    seam = InterceptingFS()
    data = _three_chunks()
    cut = MiB + 10

    def shrunk(call: Call, pread: Callable[..., bytes]) -> bytes:
        """Read as if the file were cut at `cut` right after the size check."""
        offset = call["offset"]
        return pread(call["fd"], min(call["size"], max(0, cut - offset)), offset)

    with make_env(session_dir, fs=seam) as env:
        sealed = env.put(data)
        stream = env.store.open_stream("bash")
        stream.write(data)
        with seam.around("pread", shrunk):
            for handle in (sealed, stream.handle):
                with pytest.raises(ArtifactIntegrityError, match="shrank"):
                    env.reader.read_artifact(handle, len(ref_lines(data)) - 3, 2)
                with pytest.raises(ArtifactIntegrityError, match="shrank"):
                    env.reader.grep_artifact(handle, "absent")
                assert env.reader.read_artifact(handle, 0, 2) == ref_read(data, 0, 2)
        stream.close()


def test_an_orphaned_regex_worker_is_ended_by_its_cpu_limit() -> None:
    """Backstop: a worker whose parent died (nobody to kill it) stops by itself."""
    header = json.dumps({"pattern": "(a+)+$", "limit": 1, "cpu_seconds": 1})
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _REGEX_WORKER],
        input=header.encode() + b"\n" + b"a" * 40 + b"b\n",
        capture_output=True,
        timeout=HANG_GUARD_SECONDS,  # without the CPU limit it would run on
        check=False,
    )
    assert done.returncode < 0  # killed by SIGXCPU / SIGKILL


def test_an_open_stream_page_reads_only_up_to_its_page(session_dir: Path) -> None:
    recorder = InterceptingFS(record={"pread"})
    data = _three_chunks()
    with make_env(session_dir, fs=recorder) as env:
        stream = env.store.open_stream("bash")
        stream.write(data)
        recorder.calls.clear()
        assert env.reader.read_artifact(stream.handle, 3, 4) == ref_read(data, 3, 4)
        assert {offset // MiB for offset, _ in preads(recorder)} == {0}
        stream.close()


def test_regex_sees_the_empty_last_piece_like_split(env: Env) -> None:
    for data, expected in [(b"a\n", [2]), (b"", [1]), (b"a\n\nb", [2]), (b"a", [])]:
        handle = env.put(data)
        result = env.reader.grep_artifact(handle, "^$", regex=True)
        assert [m.line_number for m in result.matches] == expected, data
        check_grep(env.reader, handle, data, "^$", regex=True, context=1)


@pytest.mark.parametrize(
    "limit", [0, -1, float("nan"), float("inf"), 10**400, True, "1"]
)
def test_a_regex_limit_that_is_no_finite_time_is_refused(
    env: Env, limit: object
) -> None:
    with pytest.raises(ValueError, match="regex_timeout"):
        ArtifactReader(env.session, env.store, regex_timeout=limit)  # type: ignore[arg-type]
    handle = env.put(b"abc\n")
    with pytest.raises(ValueError, match="regex_timeout"):
        env.reader.grep_artifact(handle, "b", regex=True, regex_timeout=limit)  # type: ignore[arg-type]
