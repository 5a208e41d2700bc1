"""Write an artifact's bytes while hashing and scanning them (S2.3, S2.5, S1.6).

A big chunk is written by a helper thread while the caller's thread takes its
chunk digests, newline counts and first line, and scans the chunk before it for
key lines: `os.write` and SHA-256 release the GIL, so on two cores a store
costs about as much as its slowest part instead of the sum. The whole-file
digest of a chunk is taken by whichever thread is free first (the write or the
hashing is the slower one depending on the disk). The key-line scanner only
sees bytes known to be in the file, one chunk behind.

After a failed write the digests (taken while the write ran) no longer
describe the file, so `content()` hashes the file from disk instead.
"""

from __future__ import annotations

import errno
import hashlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TYPE_CHECKING

from spillvault.domain.artifact import ArtifactContent
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.summary import summarize, visible

if TYPE_CHECKING:
    from spillvault.domain.ports import FileSystem, KeyLineScanner

FIRST_LINE_BYTES = 1024
"""How much of the first non-empty line is kept for the summary (>= 160 chars)."""
OVERLAP_MIN = 256 * 1024
"""Smaller chunks are written inline: a thread hand-off would cost more."""
# ESC is kept: it starts an escape sequence, which the summary removes whole.
_BLANK = bytes(c for c in range(0x21) if c != 0x1B) + b"\x7f"


class ContentHasher:
    """Hash bytes as they go by: whole digest, chunk digests, lines (S2.3, S2.5).

    Memory is bounded: two hash states and at most `FIRST_LINE_BYTES` of the
    first non-empty line. Lines split on newline bytes only; a last line without a
    newline counts. The whole digest may be fed separately (`update_whole`), by
    another thread, as long as each part sees the bytes in order.
    """

    def __init__(self) -> None:
        self._whole = hashlib.sha256()
        self._chunk = hashlib.sha256()
        self._chunk_fill = 0
        self._chunk_newlines = 0
        self._digests: list[str] = []
        self._newlines: list[int] = []
        self._total_newlines = 0
        self._ends_with_newline = True
        self._line = bytearray()
        self._first_line: str | None = None
        self.size = 0

    def update(
        self, data: bytes, start: int = 0, end: int | None = None, *, whole: bool = True
    ) -> int:
        """Account for `data[start:end]` and return its newline count.

        With `whole=False` the whole digest is left to `update_whole`. No copy
        of the bytes is kept.
        """
        stop = len(data) if end is None else end
        if stop <= start:
            return 0
        view = memoryview(data)
        pos = start
        counted = 0
        while pos < stop:
            piece_end = min(stop, pos + CHUNK_SIZE - self._chunk_fill)
            piece = view[pos:piece_end]
            if whole:
                self._whole.update(piece)
            self._chunk.update(piece)
            newlines = data.count(b"\n", pos, piece_end)
            counted += newlines
            self._chunk_newlines += newlines
            self._chunk_fill += piece_end - pos
            if self._chunk_fill == CHUNK_SIZE:
                self._close_chunk()
            pos = piece_end
        if self._first_line is None:
            self._scan_first_line(data, start, stop)
        self._total_newlines += counted
        self.size += stop - start
        self._ends_with_newline = data[stop - 1] == 0x0A
        return counted

    def update_whole(self, piece: bytes | memoryview) -> None:
        """Feed the whole-content digest only."""
        self._whole.update(piece)

    def _close_chunk(self) -> None:
        self._digests.append(self._chunk.hexdigest())
        self._newlines.append(self._chunk_newlines)
        self._chunk = hashlib.sha256()
        self._chunk_fill = 0
        self._chunk_newlines = 0

    def _scan_first_line(self, data: bytes, start: int, stop: int) -> None:
        pos = start
        while pos < stop:
            newline = data.find(b"\n", pos, stop)
            line_end = stop if newline < 0 else newline
            while pos < line_end and len(self._line) < FIRST_LINE_BYTES:
                take = min(line_end, pos + FIRST_LINE_BYTES - len(self._line))
                self._line += data[pos:take]
                pos = take
                stripped = self._line.lstrip(_BLANK)
                if len(stripped) != len(self._line):
                    self._line = bytearray(stripped)
            if newline < 0:
                return
            if self._take_line():
                return
            pos = newline + 1

    def _take_line(self) -> bool:
        text = _visible(self._line)
        self._line.clear()
        if text:
            self._first_line = text
        return bool(text)

    def finish(self) -> tuple[ArtifactContent, str]:
        """Return the facts about every byte so far, and the first non-empty line.

        The hasher is not changed: a stream may go on after a snapshot.
        """
        digests, newlines = list(self._digests), list(self._newlines)
        if self._chunk_fill:
            digests.append(self._chunk.copy().hexdigest())
            newlines.append(self._chunk_newlines)
        lines = self._total_newlines + (0 if self._ends_with_newline else 1)
        content = ArtifactContent(
            content_sha256=self._whole.hexdigest(),
            size_bytes=self.size,
            line_count=lines,
            chunk_sha256=tuple(digests),
            chunk_newlines=tuple(newlines),
        )
        first = self._first_line
        if first is None:
            first = _visible(self._line)
        return content, first


def _visible(raw: bytes | bytearray) -> str:
    return visible(bytes(raw).decode("utf-8", errors="replace"))


def summary_for(content: ArtifactContent, first_line: str) -> str:
    """Return the deterministic summary of stored bytes (S2.3)."""
    return summarize(first_line, content.line_count, content.size_bytes)


def hash_open_file(fs: FileSystem, fd: int) -> tuple[ArtifactContent, str]:
    """Hash a whole open file with `pread` in 1 MiB steps (bounded memory)."""
    hasher = ContentHasher()
    offset = 0
    while True:
        data = fs.pread(fd, CHUNK_SIZE, offset)
        if not data:
            break
        hasher.update(data)
        offset += len(data)
    return hasher.finish()


def digest_open_file(fs: FileSystem, fd: int) -> tuple[str, int]:
    """Return the SHA-256 and size of a whole open file (`pread`, bounded memory)."""
    digest = hashlib.sha256()
    offset = 0
    while data := fs.pread(fd, CHUNK_SIZE, offset):
        digest.update(data)
        offset += len(data)
    return digest.hexdigest(), offset


class ContentWriter:
    """Append chunks to an open file, hashing them and feeding a key-line scanner.

    One writer per file, used from one thread. Call `close()` when done: it
    feeds the scanner the last chunk and stops the helper threads.
    """

    def __init__(
        self, fs: FileSystem, fd: int, scanner: KeyLineScanner | None = None
    ) -> None:
        self._fs = fs
        self._fd = fd
        self._scanner = scanner
        self._hasher = ContentHasher()
        self._helper: ThreadPoolExecutor | None = None
        self._unscanned: tuple[bytes, int] | None = None
        self._scanning: ThreadPoolExecutor | None = None
        self._scan_running: Future[None] | None = None
        self._failed = False

    @property
    def size(self) -> int:
        """Bytes handed to `write` so far (all in the file unless a write failed)."""
        return self._hasher.size

    def write(self, data: bytes) -> None:
        """Write every byte of `data`; on failure the error propagates."""
        if self._failed:
            msg = "a write to this file failed before"
            raise ValueError(msg)
        running: Future[None] | None = None
        digest_claim = threading.Lock()
        if len(data) >= OVERLAP_MIN:
            # Whichever thread is free first takes the whole digest of `data`.
            running = self._helper_pool().submit(
                self._write_then_digest, data, digest_claim
            )
        else:
            self._write_or_fail(data)
        newlines = self._hasher.update(data, whole=False)
        self._scan_unscanned()
        if running is not None:
            if digest_claim.acquire(blocking=False):
                self._hasher.update_whole(data)
            try:
                running.result()
            except BaseException:
                self._failed = True
                # The helper must be done with the fd before anyone closes it.
                _wait_out(running)
                raise
        self._unscanned = (data, newlines)

    def content(self) -> tuple[ArtifactContent, str]:
        """Return the facts of the bytes in the file (from disk after a failure)."""
        written = not self._failed and self._fs.fstat(self._fd).st_size == self.size
        if written:
            return self._hasher.finish()
        return hash_open_file(self._fs, self._fd)

    def close(self) -> None:
        """Feed the scanner the last written chunk, stop the helpers; idempotent."""
        try:
            self._scan_unscanned(wait=True)
        finally:
            for pool in (self._helper, self._scanning):
                if pool is not None:
                    pool.shutdown(wait=True)
            self._helper = self._scanning = None

    def _helper_pool(self) -> ThreadPoolExecutor:
        if self._helper is None:
            self._helper = ThreadPoolExecutor(1, thread_name_prefix="spillvault-write")
        return self._helper

    def _write_or_fail(self, data: bytes) -> None:
        try:
            self._write_all(data)
        except BaseException:
            self._failed = True
            raise
        self._hasher.update_whole(data)

    def _write_then_digest(self, data: bytes, digest_claim: threading.Lock) -> None:
        self._write_all(data)
        if digest_claim.acquire(blocking=False):
            self._hasher.update_whole(data)

    def _write_all(self, data: bytes) -> None:
        """Write all of `data`, at most 1 MiB per call, looping on short writes."""
        total = len(data)
        pos = 0
        while pos < total:
            end = min(total, pos + CHUNK_SIZE)
            piece = data if pos == 0 and end == total else data[pos:end]
            written = self._fs.write(self._fd, piece)
            if written <= 0:
                raise OSError(errno.EIO, "write made no progress")
            pos += written

    def _scan_unscanned(self, *, wait: bool = False) -> None:
        """Scan the chunk before this one, on a thread of its own.

        It runs while the next chunk is hashed (Hyperscan and SHA-256 both
        release the GIL). Chunks are scanned in order, one at a time: at most
        one waits.
        """
        unscanned, self._unscanned = self._unscanned, None
        running, self._scan_running = self._scan_running, None
        if running is not None:
            running.result()  # in order; a scanner's error surfaces here
        if unscanned is None or self._scanner is None:
            return
        data, newlines = unscanned
        if wait or len(data) < OVERLAP_MIN:
            self._scanner.feed(data, newlines)
            return
        if self._scanning is None:
            self._scanning = ThreadPoolExecutor(1, thread_name_prefix="spillvault-scan")
        self._scan_running = self._scanning.submit(self._scanner.feed, data, newlines)


def _wait_out(running: Future[None]) -> None:
    """Wait until `running` is done, even through a KeyboardInterrupt."""
    interrupted: BaseException | None = None
    while not running.done():
        try:
            wait_for([running])
        except KeyboardInterrupt as error:
            interrupted = error
    if interrupted is not None:
        raise interrupted


__all__ = [
    "FIRST_LINE_BYTES",
    "ContentHasher",
    "ContentWriter",
    "digest_open_file",
    "hash_open_file",
    "summary_for",
]
