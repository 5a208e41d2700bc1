r"""Page faults: reading artifacts back, verified, at the cost of the page (S3).

`ArtifactReader` serves `read_artifact`, `read_artifact_bytes`, `grep_artifact`
and `read_from_disk` for one session. Every call starts afresh: the handle is
resolved by the store (S3.2), the artifact's record is loaded from the event
store, the file is opened per A4 and `fstat`ed, and its size is compared with
the record. Nothing is cached across calls, so nothing can go stale silently.

Verification (S3.3): the record of a sealed, partial or orphan artifact holds
the SHA-256 and newline count of every 1 MiB chunk (S2.5). A read finds the
chunks holding its lines from the newline counts alone (S3.4: no earlier chunk
is read), reads each touched chunk whole, checks its digest and only then
slices it. A read that returns the whole artifact also checks the whole-file
digest. Any mismatch, short read or changed size raises
`ArtifactIntegrityError` and returns nothing.

Open streams (state `open`, S2.4) have no digests yet: they are readable, but
their bytes are NOT verified and reflect the file as it was when the call
began (later appends are ignored); `ArtifactReader.is_verified` says which
kind a handle names. Quarantined, lost and deleted artifacts are not readable.

Text is split on "\n" only and decoded with `errors="replace"`. Because "\n"
never occurs inside a UTF-8 sequence and the decoder resynchronises at every
byte that is not a continuation byte, decoding a line's bytes alone gives the
same text as decoding the whole artifact and splitting it.

Literal grep searches the raw bytes chunk by chunk for the encoded pattern and
decodes only the lines that match. Read-ahead threads, one a core, read each
next chunk, verify it and only then search it (`pread`, `hashlib` and a
Hyperscan scan all release the GIL, so hashing, the costliest part, runs on
every core); line numbers come from the recorded newline counts plus a count
up to each hit. A regex runs in a separate Python process fed the verified
bytes through a pipe, and is killed when its wall-clock limit passes (CPython's
`re` holds the GIL, so a thread could not be stopped).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import operator
import os
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import TYPE_CHECKING, NamedTuple, Self, TypeVar

from spillvault.domain.bounds import number_problem
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import ArtifactAccessError, ArtifactIntegrityError
from spillvault.domain.machines import ARTIFACT_MACHINE
from spillvault.domain.reading import GrepMatch, GrepResult
from spillvault.domain.values import ArtifactReference

try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel is a dependency on Linux
    hyperscan = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import IO

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.artifact import ArtifactContent
    from spillvault.domain.ports import ArtifactBlob, ArtifactReadPort

_T = TypeVar("_T")

DEFAULT_REGEX_TIMEOUT = 5.0
# Read-ahead threads for scans: hashing bounds a scan, so one a core (the
# thread that builds the result mostly waits), up to four, which verify 8 GB/s:
# more than a page cache copy or an object store keeps up with.
PREFETCH_WORKERS = max(1, min(4, os.cpu_count() or 1))
PREFETCH_DEPTH = 2 * PREFETCH_WORKERS
_CACHE_CHUNKS = 4
_FAST_PATTERN_LIMIT = 4096  # longer needles take the per-line path
_NEWLINE = b"\n"
_SEEK_BLOCK = 16 * 1024
_READABLE = ARTIFACT_MACHINE.tagged("readable")

# The regex worker: a fresh interpreter (-I -S) reading a JSON header line, then
# the bytes to search; it prints the 0-based indices of matching lines.
_REGEX_WORKER = r"""
import json, re, resource, sys
data = sys.stdin.buffer
params = json.loads(data.readline())
cpu = params["cpu_seconds"]  # outlives no parent: the kernel ends it
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
try:
    rx = re.compile(params["pattern"])
except (re.error, OverflowError, RecursionError, ValueError) as error:
    sys.stderr.write(str(error))
    sys.exit(3)
limit = params["limit"]
found = []
index = -1
ended_with_newline = True
for index, raw in enumerate(data):
    ended_with_newline = raw.endswith(b"\n")
    line = raw[:-1] if ended_with_newline else raw
    if rx.search(line.decode("utf-8", "replace")):
        found.append(index)
        if len(found) >= limit:
            break
else:
    if ended_with_newline and rx.search(""):
        found.append(index + 1)
sys.stdout.write("\n".join(map(str, found)))
"""


class RegexTimeoutError(TimeoutError):
    """A regex search ran past its wall-clock limit; its worker was killed."""


class ArtifactReader:
    """Verified, page-sized reads of one session's artifacts (S3)."""

    def __init__(
        self,
        session: SessionHandles,
        store: ArtifactReadPort,
        *,
        regex_timeout: float = DEFAULT_REGEX_TIMEOUT,
    ) -> None:
        _check_regex_timeout(regex_timeout)
        self._session = session
        self._store = store
        self.regex_timeout = regex_timeout

    # public API -------------------------------------------------------------

    def read_artifact(
        self,
        artifact: ArtifactReference | str,
        offset: int = 0,
        limit: int = 2000,
        *,
        start_line: int | None = None,
    ) -> str:
        """Return line pieces `[offset, offset + limit)` joined by newlines (S3.1).

        `start_line=N` (1-based, as grep hits and previews number lines) is
        the same as `offset=N - 1`; give one or the other.
        """
        offset = _first_offset(offset, start_line)
        limit = _non_negative(limit, "limit")
        with self._open(artifact) as chunks:
            chunks.preload_lines(offset, limit)
            span = chunks.line_span(offset, limit)
            if span is None:
                return ""
            return _decode(chunks.slice(*span))

    def read_from_disk(
        self, path: str | os.PathLike[str], offset: int = 0, limit: int = 2000
    ) -> str:
        """Read lines of an artifact named by path, confined like S3.2."""
        offset = _non_negative(offset, "offset")
        limit = _non_negative(limit, "limit")
        try:
            handle = os.fspath(path)
        except TypeError:
            msg = f"path must be a string, not {type(path).__name__}"
            raise ArtifactAccessError(msg) from None
        if not isinstance(handle, str):
            msg = "path must be a string, not bytes"
            raise ArtifactAccessError(msg)
        return self.read_artifact(handle, offset, limit)

    def read_artifact_bytes(
        self, artifact: ArtifactReference | str, start: int, end: int
    ) -> bytes:
        """Return the bytes `[start, end)`; `end` past the size stops at the size."""
        start = _non_negative(start, "start")
        end = _non_negative(end, "end")
        if end < start:
            msg = f"end must be >= start ({end} < {start})"
            raise ValueError(msg)
        with self._open(artifact) as chunks:
            return chunks.slice(start, min(end, chunks.size))

    def grep_artifact(  # noqa: PLR0913 - SPEC's signature plus the continuation
        self,
        artifact: ArtifactReference | str,
        pattern: str,
        *,
        context: int = 0,
        max_matches: int = 100,
        regex: bool = False,
        offset: int = 0,
        regex_timeout: float | None = None,
        start_line: int | None = None,
    ) -> GrepResult:
        """Find lines containing `pattern` (a literal unless `regex`), in order.

        The search starts at 1-based `start_line` (or 0-based `offset`); a
        truncated result's `next_start_line` is where the next match is, so
        `grep_artifact(..., start_line=result.next_start_line)` continues the
        search. Context lines may come from before the start.
        """
        if not isinstance(pattern, str):
            msg = f"pattern must be a string, not {type(pattern).__name__}"
            raise ValueError(msg)  # noqa: TRY004 - SPEC: invalid arguments are ValueError
        context = _non_negative(context, "context")
        max_matches = _non_negative(max_matches, "max_matches")
        offset = _first_offset(offset, start_line)
        timeout = self.regex_timeout if regex_timeout is None else regex_timeout
        if regex:
            _check_regex_timeout(timeout)
        with self._open(artifact) as chunks:
            search = _Search(chunks, context, max_matches)
            if regex:
                lines = _regex_lines(chunks, pattern, offset, max_matches + 1, timeout)
                return search.from_line_numbers(lines)
            if "\n" in pattern:
                return GrepResult((), truncated=False)
            needle = _fast_needle(pattern)
            if needle is not None:
                return search.literal(needle, offset)
            return search.by_line(offset, lambda line: pattern in line)

    def is_verified(self, artifact: ArtifactReference | str) -> bool:
        """Say whether reads of this artifact are digest-verified (not `open`)."""
        with self._open(artifact) as chunks:
            return chunks.content is not None

    # plumbing ---------------------------------------------------------------

    def _open(self, artifact: ArtifactReference | str) -> _Chunks:
        reference = artifact if isinstance(artifact, ArtifactReference) else None
        handle = artifact if reference is None else reference.handle
        if not isinstance(handle, str):
            kind = type(handle).__name__
            msg = f"artifact must be an ArtifactReference or a handle, not {kind}"
            raise ArtifactAccessError(msg)
        filename = self._store.resolve(handle)
        record = self._session.store.get_artifact(filename)
        if record is None:
            msg = f"{filename} is not a recorded artifact of this session"
            raise ArtifactAccessError(msg)
        if record.state not in _READABLE:
            msg = f"{filename} is {record.state}: not readable"
            raise ArtifactAccessError(msg)
        content = record.stored_content
        if reference is not None:
            _check_reference(filename, reference, content)
        try:
            blob = self._store.open_for_read(filename)
        except FileNotFoundError:
            msg = f"{filename} is missing from the session's artifacts"
            raise ArtifactIntegrityError(msg) from None
        try:
            if content is not None and blob.size != content.size_bytes:
                msg = (
                    f"size mismatch: {filename} has {blob.size} bytes, "
                    f"{content.size_bytes} recorded"
                )
                raise ArtifactIntegrityError(msg)
            return _Chunks(blob, filename, content)
        except BaseException:
            blob.close()
            raise


def _non_negative(value: int, name: str) -> int:
    if isinstance(value, bool):
        msg = f"{name} must be an integer, not bool"
        raise TypeError(msg)
    number = operator.index(value)
    if number < 0:
        msg = f"{name} must be >= 0"
        raise ValueError(msg)
    return number


def _first_offset(offset: int, start_line: int | None) -> int:
    """Return the 0-based first line from `offset` or 1-based `start_line`."""
    offset = _non_negative(offset, "offset")
    if start_line is None:
        return offset
    if offset:
        msg = "give offset (0-based) or start_line (1-based), not both"
        raise ValueError(msg)
    line = _non_negative(start_line, "start_line")
    if line < 1:
        msg = "start_line is 1-based: it must be >= 1"
        raise ValueError(msg)
    return line - 1


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _check_reference(
    filename: str, reference: ArtifactReference, content: ArtifactContent | None
) -> None:
    if content is None:
        msg = f"digest mismatch: {filename} is still open, the reference names a seal"
        raise ArtifactIntegrityError(msg)
    if reference.content_sha256 != content.content_sha256:
        msg = (
            f"digest mismatch: the reference names {reference.content_sha256[:12]}…, "
            f"{filename} is {content.content_sha256[:12]}…"
        )
        raise ArtifactIntegrityError(msg)
    if reference.size_bytes != content.size_bytes:
        msg = (
            f"size mismatch: the reference names {reference.size_bytes} bytes, "
            f"{filename} has {content.size_bytes}"
        )
        raise ArtifactIntegrityError(msg)


class _Chunks:
    """One call's view of one open artifact: verified chunks and line geometry.

    Chunk `c` covers bytes `[c * CHUNK_SIZE, (c + 1) * CHUNK_SIZE)`. `get(c)`
    returns its bytes only after checking them against the recorded digest.
    A few chunks stay in memory for the length of the call, never longer.
    """

    def __init__(
        self, blob: ArtifactBlob, filename: str, content: ArtifactContent | None
    ) -> None:
        self.blob = blob
        self.filename = filename
        self.size = size = blob.size
        self.content = content
        self.count = -(-size // CHUNK_SIZE)
        self._cache: dict[int, bytes] = {}
        self._pending: dict[int, Future[bytes]] = {}
        self._pool: ThreadPoolExecutor | None = None  # started by the first scan
        # newlines before chunk i, for the chunks counted so far: all of them
        # from the record; an open stream's are counted (unverified) on demand
        self._prefix = [0]
        if content is not None:
            for count in content.chunk_newlines:
                self._prefix.append(self._prefix[-1] + count)
        self._memo = (-1, 0, 0)  # chunk, offset in it, newlines before that point
        self._newline = (0, -1)  # the last newline found: its number, its position

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the read-ahead (waiting for reads in flight), then close the blob."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self._cache.clear()
        self.blob.close()

    # chunks -----------------------------------------------------------------

    def load(self, index: int) -> bytes:
        """Read chunk `index` whole and verify it (safe on any thread)."""
        return self._verified(index, self._read(index, index))

    def _read(self, first: int, last: int) -> bytes:
        """Read chunks `first..last` in one read (one request to an object store)."""
        base = first * CHUNK_SIZE
        want = min((last + 1) * CHUNK_SIZE, self.size) - base
        data = self.blob.read_at(base, want)
        if len(data) != want:
            msg = f"size mismatch: {self.filename} shrank while reading chunk {first}"
            raise ArtifactIntegrityError(msg)
        return data

    def _verified(self, index: int, data: bytes) -> bytes:
        if self.content is not None:
            digest = hashlib.sha256(data).hexdigest()
            if digest != self.content.chunk_sha256[index]:
                msg = f"digest mismatch in chunk {index} of {self.filename}"
                raise ArtifactIntegrityError(msg)
        return data

    def preload_lines(self, offset: int, limit: int) -> None:
        """Read every chunk line pieces `[offset, offset + limit)` touch, at once.

        The recorded newline counts say which chunks those are before any byte
        is read, so a page costs one read of its chunks (one ranged GET) rather
        than one per chunk. Only for sealed artifacts, and pages of a few chunks.
        """
        prefix = self._prefix
        if self.content is None or limit == 0 or offset > prefix[-1]:
            return
        # The newline before line piece `offset` (none for the first), and the
        # one ending piece `offset + limit - 1` (none after the last: the end).
        first = bisect.bisect_left(prefix, offset) - 1 if offset else 0
        ending = offset + limit
        last = bisect.bisect_left(prefix, ending) - 1 if ending <= prefix[-1] else -1
        last = self.count - 1 if last < 0 else last
        first = max(first, 0)
        wanted = [i for i in range(first, last + 1) if i not in self._cache]
        if not wanted or last - first + 1 > _CACHE_CHUNKS:
            return
        data = self._read(wanted[0], wanted[-1])
        for index in range(wanted[0], wanted[-1] + 1):
            base = (index - wanted[0]) * CHUNK_SIZE
            chunk = self._verified(index, data[base : base + CHUNK_SIZE])
            if len(self._cache) >= _CACHE_CHUNKS:
                del self._cache[next(iter(self._cache))]
            self._cache[index] = chunk

    def ahead(self, task: Callable[[int], _T], index: int) -> Future[_T]:
        """Run `task(index)` on a read-ahead thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(PREFETCH_WORKERS)
        return self._pool.submit(task, index)

    def prefetch(self, first: int) -> None:
        """Start reading and verifying the chunks from `first` on ahead."""
        for index in range(first, min(first + PREFETCH_DEPTH, self.count)):
            if index not in self._cache and index not in self._pending:
                self._pending[index] = self.ahead(self.load, index)

    def get(self, index: int) -> bytes:
        """Return chunk `index`, verified."""
        data = self._cache.get(index)
        if data is not None:
            return data
        future = self._pending.pop(index, None)
        data = future.result() if future is not None else self.load(index)
        self.keep(index, data)
        return data

    def keep(self, index: int, data: bytes) -> None:
        """Hold chunk `index`'s verified bytes for the rest of the call (a few)."""
        if len(self._cache) >= _CACHE_CHUNKS:
            del self._cache[next(iter(self._cache))]
        self._cache[index] = data

    def slice(self, start: int, end: int) -> bytes:
        """Return the verified bytes `[start, end)` (reading all checks the file)."""
        if start >= end:
            return b""
        first, last = start // CHUNK_SIZE, (end - 1) // CHUNK_SIZE
        whole = (
            hashlib.sha256()
            if self.content is not None and start == 0 and end == self.size
            else None
        )
        parts = []
        for index in range(first, last + 1):
            data = self.get(index)
            if whole is not None and self.count > 1:
                whole.update(data)
            base = index * CHUNK_SIZE
            parts.append(data[max(start - base, 0) : end - base])
        if whole is not None and self.content is not None:
            digest = (
                whole.hexdigest() if self.count > 1 else self.content.chunk_sha256[0]
            )
            if digest != self.content.content_sha256:
                msg = f"digest mismatch: {self.filename} read whole"
                raise ArtifactIntegrityError(msg)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    # lines ------------------------------------------------------------------

    def _count_through(self, index: int) -> list[int]:
        """Return the prefix sums, known at least up to chunk `index`."""
        prefix = self._prefix
        while len(prefix) <= index:
            prefix.append(prefix[-1] + self.get(len(prefix) - 1).count(_NEWLINE))
        return prefix

    def has_newline(self, number: int) -> bool:
        """Say whether there are at least `number` newlines (counting as needed)."""
        prefix = self._prefix
        while prefix[-1] < number and len(prefix) <= self.count:
            prefix.append(prefix[-1] + self.get(len(prefix) - 1).count(_NEWLINE))
        return prefix[-1] >= number

    def newline_position(self, number: int) -> int:
        """Return the byte position of the `number`-th newline (1-based)."""
        prefix = self._prefix  # covers `number`: callers ask has_newline first
        index = bisect.bisect_left(prefix, number) - 1
        base = index * CHUNK_SIZE
        # A page's end is searched for from its start, not its chunk's start.
        known, at = self._newline
        data = self.get(index)
        if at >= base and known <= number:
            position = base + _nth_newline(data, number - known, at + 1 - base)
        else:
            # Counted from whichever end of the chunk is nearer.
            nth, total = number - prefix[index], prefix[index + 1] - prefix[index]
            if 2 * nth > total:
                position = base + _nth_newline_back(data, total - nth + 1)
            else:
                position = base + _nth_newline(data, nth)
        self._newline = (number, position)
        return position

    def line_start(self, line: int) -> int | None:
        """Return where 0-based line piece `line` starts, None past the last."""
        if line == 0:
            return 0
        if not self.has_newline(line):
            return None
        return self.newline_position(line) + 1

    def line_end(self, line: int) -> int:
        """Return where line piece `line` ends (its newline, or the size)."""
        if not self.has_newline(line + 1):
            return self.size
        return self.newline_position(line + 1)

    def line_span(self, offset: int, limit: int) -> tuple[int, int] | None:
        """Return the byte range of line pieces `[offset, offset + limit)`."""
        start = self.line_start(offset)
        if start is None or limit == 0:
            return None
        return start, self.line_end(offset + limit - 1)

    def find_newline(self, position: int) -> int:
        """Return the first newline at or after `position`, else the size."""
        index = position // CHUNK_SIZE
        while index < self.count:
            base = index * CHUNK_SIZE
            found = self.get(index).find(_NEWLINE, max(position - base, 0))
            if found >= 0:
                return base + found
            index += 1
        return self.size

    def line_start_before(self, position: int, floor: int) -> int:
        """Return the start of the line holding `position`, no lower than `floor`."""
        end = position
        index = (end - 1) // CHUNK_SIZE
        while end > floor:
            base = index * CHUNK_SIZE
            found = self.get(index).rfind(_NEWLINE, max(floor - base, 0), end - base)
            if found >= 0:
                return base + found + 1
            end = base
            index -= 1
        return floor

    def newlines_before(self, position: int) -> int:
        """Count the newlines in `[0, position)` (the 0-based line number)."""
        index = min(position // CHUNK_SIZE, self.count - 1)
        if index < 0:
            return 0
        offset = position - index * CHUNK_SIZE
        data = self.get(index)
        memo_index, memo_offset, memo_count = self._memo
        if memo_index == index and memo_offset <= offset:
            count = memo_count + data.count(_NEWLINE, memo_offset, offset)
        else:
            prefix = self._count_through(index)
            count = prefix[index] + data.count(_NEWLINE, 0, offset)
        self._memo = (index, offset, count)
        return count


class _Search:
    """Builds grep results: matches with context, truncation and resume point."""

    def __init__(self, chunks: _Chunks, context: int, max_matches: int) -> None:
        self.chunks = chunks
        self.context = context
        self.max_matches = max_matches
        self.matches: list[GrepMatch] = []

    def add(self, number: int, start: int, end: int) -> GrepResult | None:
        """Record line piece `number` at `[start, end)`; a result once truncated."""
        if len(self.matches) >= self.max_matches:
            return GrepResult(tuple(self.matches), truncated=True, resume_from=number)
        chunks = self.chunks
        before: list[str] = []
        cursor = start
        for _ in range(min(self.context, number)):
            previous = chunks.line_start_before(cursor - 1, 0)
            before.append(_decode(chunks.slice(previous, cursor - 1)))
            cursor = previous
        before.reverse()
        after: list[str] = []
        cursor = end
        for _ in range(self.context):
            if cursor >= chunks.size:
                break
            following = chunks.find_newline(cursor + 1)
            after.append(_decode(chunks.slice(cursor + 1, following)))
            cursor = following
        line = _decode(chunks.slice(start, end))
        self.matches.append(GrepMatch(number + 1, line, tuple(before), tuple(after)))
        return None

    def done(self) -> GrepResult:
        """Return the untruncated result."""
        return GrepResult(tuple(self.matches), truncated=False)

    def literal(self, needle: bytes, offset: int) -> GrepResult:
        """Search raw bytes for `needle`, decoding only the lines that match."""
        chunks = self.chunks
        position = chunks.line_start(offset)
        if position is None:
            return self.done()
        finder = _Finder(chunks, needle)
        while (hit := finder.next(position)) >= 0:
            start = chunks.line_start_before(hit, position)
            end = chunks.find_newline(hit + len(needle))
            result = self.add(chunks.newlines_before(start), start, end)
            if result is not None:
                return result
            if end >= chunks.size:
                break
            position = end + 1
        return self.done()

    def by_line(self, offset: int, matches: Callable[[str], bool]) -> GrepResult:
        """Test every decoded line piece from `offset` on (the general path)."""
        chunks = self.chunks
        start = chunks.line_start(offset)
        if start is None:
            return self.done()
        number = offset
        while True:
            chunks.prefetch(start // CHUNK_SIZE + 1)
            end = chunks.find_newline(start)
            if matches(_decode(chunks.slice(start, end))):
                result = self.add(number, start, end)
                if result is not None:
                    return result
            if end >= chunks.size:
                return self.done()
            start = end + 1
            number += 1

    def from_line_numbers(self, numbers: list[int]) -> GrepResult:
        """Build the result from the 0-based line numbers a worker found."""
        for number in numbers:
            start = self.chunks.line_start(number)
            if start is None:  # the worker disagrees with the record: refuse
                msg = f"regex worker named line {number + 1} past the end"
                raise ArtifactIntegrityError(msg)
            result = self.add(number, start, self.chunks.line_end(number))
            if result is not None:
                return result
        return self.done()


def _nth_newline(data: bytes, number: int, start: int = 0) -> int:
    """Return the position of the `number`-th newline (1-based) from `start` on.

    Whole blocks are skipped with `count` (C speed), then at most one block's
    newlines are stepped through with `find`.
    """
    while True:
        end = start + _SEEK_BLOCK
        count = data.count(_NEWLINE, start, end)
        if count >= number or end >= len(data):
            break
        number -= count
        start = end
    position = start - 1
    for _ in range(number):
        position = data.find(_NEWLINE, position + 1)
    return position


def _nth_newline_back(data: bytes, number: int) -> int:
    """Return the position of the `number`-th newline (1-based) from the end."""
    stop = len(data)
    while True:
        start = max(stop - _SEEK_BLOCK, 0)
        count = data.count(_NEWLINE, start, stop)
        if count >= number or start == 0:
            break
        number -= count
        stop = start
    position = stop
    for _ in range(number):
        position = data.rfind(_NEWLINE, 0, position)
    return position


def _fast_needle(pattern: str) -> bytes | None:
    """Return the bytes to search for, or None when only decoded text will do.

    A valid UTF-8 needle occurs in the raw bytes exactly where the pattern
    occurs in the decoded text, unless the pattern holds U+FFFD (which the
    decoder makes from invalid bytes) or a lone surrogate (which it never makes).
    """
    if not pattern or "\ufffd" in pattern:
        return None
    try:
        needle = pattern.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return needle if len(needle) <= _FAST_PATTERN_LIMIT else None


class _Probe(NamedTuple):
    """What a read-ahead thread found in one verified chunk."""

    first: int  # where the needle first occurs in the chunk, -1 nowhere
    data: bytes | None  # the chunk, kept only when the needle occurs in it
    # its first and last `len(needle) - 1` bytes, for matches across chunks
    head: bytes
    tail: bytes


class _Finder:
    """Finds a needle in verified chunks, including across chunk boundaries.

    Once the search moves past its first chunk, read-ahead threads verify
    each next chunk, then search it. A chunk without the needle is dropped by
    the thread that read it, all but its ends: its memory is then reused by
    that thread's next read rather than handed back to the system and faulted
    in again (a sixth of a scan's CPU time when it was not). A search that
    ends in its first chunk starts no thread.
    """

    def __init__(self, chunks: _Chunks, needle: bytes) -> None:
        self.chunks = chunks
        self.needle = needle
        self.keep = len(needle) - 1
        self.search: Callable[[bytes], int] = operator.methodcaller("find", needle)
        self.scanning = False  # reading ahead, with the search for many chunks
        self.probes: dict[int, Future[_Probe]] = {}
        self.index = -1
        self.probe = _Probe(-1, None, b"", b"")  # of chunk `index`
        self.tail = b""  # the last `keep` bytes of chunk `index - 1`
        self.tail_base = 0

    def next(self, position: int) -> int:
        """Return the first occurrence at or after `position`, else -1."""
        chunks, needle = self.chunks, self.needle
        if position // CHUNK_SIZE != self.index:  # a jump: no tail before it
            self.tail = b""
            self._enter(position // CHUNK_SIZE)
        while self.index < chunks.count:
            probe, base = self.probe, self.index * CHUNK_SIZE
            if self.tail and position < self.tail_base + len(self.tail):
                window = self.tail + probe.head
                found = window.find(needle, max(position - self.tail_base, 0))
                if found >= 0:
                    return self.tail_base + found
            start = max(position - base, 0)
            if probe.first >= start:
                return base + probe.first
            if probe.first >= 0:  # an earlier hit: search on past it
                found = chunks.get(self.index).find(needle, start)
                if found >= 0:
                    return base + found
            self.tail = probe.tail
            self.tail_base = min(base + CHUNK_SIZE, chunks.size) - len(probe.tail)
            self._enter(self.index + 1, scan=True)
        return -1

    def _enter(self, index: int, *, scan: bool = False) -> None:
        """Move to chunk `index`: take its probe; with `scan`, read on ahead."""
        self.index = index
        chunks, probes = self.chunks, self.probes
        if index >= chunks.count:
            return
        for passed in [i for i in probes if i < index]:  # a line jumped them
            probes.pop(passed).cancel()
        if scan and not self.scanning:
            self.scanning = True
            self.search = _first_occurrence(self.needle)
        if self.scanning:
            stop = min(index + 1 + PREFETCH_DEPTH, chunks.count)
            for ahead in range(index + 1, stop):
                if ahead not in probes:
                    probes[ahead] = chunks.ahead(self._probe, ahead)
        future = probes.pop(index, None)
        self.probe = future.result() if future is not None else self._probe(index)
        if self.probe.data is not None:
            self.chunks.keep(index, self.probe.data)

    def _probe(self, index: int) -> _Probe:
        """Verify chunk `index`, then search it (mostly on a read-ahead thread)."""
        data = self.chunks.load(index)
        first = self.search(data)
        keep = self.keep
        tail = data[-keep:] if keep else b""
        return _Probe(first, data if first >= 0 else None, data[:keep], tail)


def _first_occurrence(needle: bytes) -> Callable[[bytes], int]:
    """Return a search for where `needle` first occurs in a chunk (-1: nowhere).

    Hyperscan, compiled once for a scan of many chunks: its scan releases the
    GIL, and outruns `bytes.find` several times on needles whose first bytes
    are frequent. `find` serves when Hyperscan refuses the needle (too long)
    or cannot run here.
    """
    if hyperscan is not None:
        with suppress(hyperscan.error):
            return _Scan(needle).first
    return operator.methodcaller("find", needle)


class _Scan:
    """A Hyperscan database matching one byte string; a scratch per thread."""

    def __init__(self, needle: bytes) -> None:
        self.length = len(needle)
        self.database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        # Every byte escaped in a pattern: the binding's literal mode would
        # cut the needle at its first NUL. One match is all `first` needs,
        # and Hyperscan stops scanning once it has it.
        pattern = "".join(f"\\x{byte:02x}" for byte in needle)
        self.database.compile(
            expressions=[pattern.encode("ascii")], flags=[hyperscan.HS_FLAG_SINGLEMATCH]
        )
        self.scratch = threading.local()

    def first(self, data: bytes) -> int:
        """Return where the needle first occurs in `data`, else -1."""
        scratch = getattr(self.scratch, "value", None)
        if scratch is None:
            scratch = self.scratch.value = hyperscan.Scratch(self.database)
        ends: list[int] = []

        def record(_id: int, _start: int, end: int, _flags: int, _: object) -> None:
            ends.append(end)  # None: scan on (after one match Hyperscan stops)

        self.database.scan(data, match_event_handler=record, scratch=scratch)
        return ends[0] - self.length if ends else -1


def _regex_lines(
    chunks: _Chunks, pattern: str, offset: int, limit: int, timeout: float
) -> list[int]:
    """Run `pattern` over line pieces `offset…` in a killable worker process."""
    start = chunks.line_start(offset)
    if start is None:
        return []
    header = _worker_header(pattern, limit, timeout)
    worker = _start_worker()
    feed = worker.stdin
    worker.stdin = None  # fed by the thread below; communicate() must not close it
    assert feed is not None  # noqa: S101 - stdin=PIPE
    feeder = _Feeder(chunks, feed, header, start)
    feeder.start()
    try:
        out, err = worker.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        feeder.join()
        if feeder.error is not None:
            raise feeder.error from None
        msg = f"regex timed out after {timeout:g} s: {pattern!r}"
        raise RegexTimeoutError(msg) from None
    except BaseException:
        worker.kill()
        worker.communicate()
        feeder.join()
        raise
    feeder.join()
    if feeder.error is not None:
        raise feeder.error
    return [offset + index for index in _worker_result(worker, pattern, out, err)]


def regex_matching_lines(
    pattern: str, lines: Sequence[str], timeout: float
) -> list[int]:
    """Return the indices of `lines` `pattern` matches, in the killable worker."""
    _check_regex_timeout(timeout)
    if not lines:
        return []
    data = _worker_header(pattern, len(lines), timeout)
    # One line each: the lines' own line ends are none of the pattern's business.
    data += "\n".join(line.replace("\n", " ") for line in lines).encode(
        "utf-8", "surrogatepass"
    )
    worker = _start_worker()
    try:
        out, err = worker.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        msg = f"regex timed out after {timeout:g} s: {pattern!r}"
        raise RegexTimeoutError(msg) from None
    return [i for i in _worker_result(worker, pattern, out, err) if i < len(lines)]


def _worker_header(pattern: str, limit: int, timeout: float) -> bytes:
    """Return the regex worker's JSON header line: pattern, limit, CPU seconds."""
    cpu = math.ceil(timeout) + 1  # outlives no parent: the kernel ends it
    params = {"pattern": pattern, "limit": limit, "cpu_seconds": cpu}
    return json.dumps(params).encode("ascii") + b"\n"


def _start_worker() -> subprocess.Popen[bytes]:
    """Start a regex worker: a fresh interpreter running `_REGEX_WORKER`."""
    return subprocess.Popen(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-I", "-S", "-c", _REGEX_WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _worker_result(
    worker: subprocess.Popen[bytes], pattern: str, out: bytes, err: bytes
) -> list[int]:
    """Return the matching line indices a finished regex worker printed."""
    if worker.returncode == 3:
        msg = f"invalid regex {pattern!r}: {err.decode('utf-8', 'replace')}"
        raise ValueError(msg)
    if worker.returncode != 0:
        msg = f"regex worker failed (exit {worker.returncode}): {err[-500:]!r}"
        raise RuntimeError(msg)
    return [int(line) for line in out.split()]


class _Feeder(threading.Thread):
    """Streams verified bytes to the regex worker; a dead worker ends it quietly."""

    def __init__(
        self, chunks: _Chunks, feed: IO[bytes], header: bytes, start: int
    ) -> None:
        super().__init__(daemon=True, name="spillvault-regex-feed")
        self.chunks = _Chunks(chunks.blob, chunks.filename, chunks.content)
        self.feed = feed
        self.header = header
        self.start_at = start
        self.error: ArtifactIntegrityError | None = None

    def run(self) -> None:
        """Write the header, then each verified chunk from the start offset."""
        chunks = self.chunks
        try:
            self.feed.write(self.header)
            for index in range(self.start_at // CHUNK_SIZE, chunks.count):
                data = chunks.load(index)
                skip = max(self.start_at - index * CHUNK_SIZE, 0)
                self.feed.write(memoryview(data)[skip:])
        except ArtifactIntegrityError as error:
            self.error = error
        except OSError:  # BrokenPipeError and kin: the worker stopped reading
            pass
        finally:
            with suppress(OSError):
                self.feed.close()


__all__ = ["DEFAULT_REGEX_TIMEOUT", "ArtifactReader", "RegexTimeoutError"]


MAX_REGEX_TIMEOUT = 3600.0
"""An hour: a regex search that needs longer is not one a model waits for."""


def _check_regex_timeout(timeout: object) -> None:
    """Refuse a limit that is not a finite number of seconds in (0, an hour]."""
    problem = number_problem(
        "regex_timeout", timeout, 0, MAX_REGEX_TIMEOUT, above_low=True
    )
    if problem is not None:
        raise ValueError(problem)
