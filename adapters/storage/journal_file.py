"""The journal file (S4.5, J3-J7): strict reads, whole-line appends, repair aside.

Every operation goes through the filesystem seam relative to the session
directory's fd (which the caller owns and closes) and never follows a
symlink. Reads open the file per A4 each time and demand an owned, private
regular file. The caller holds the session lock around every read-then-write
sequence (J3, J8); `append` still re-checks the size and line boundary it was
promised, so a caller with a stale view fails instead of writing in the wrong
place.

A write, fsync or truncate error poisons the `JournalFile` (J4): every later
`append` or `replace_with` on it raises. The poison lives on the instance, so
a session must keep exactly one `JournalFile` for its journal.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spillvault.adapters.storage.fs import (
    READ_FLAGS,
    check_private,
    create_private_file,
    tmp_name_for,
    write_all,
)
from spillvault.adapters.storage.fs import exists as entry_exists
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.errors import ArtifactAccessError, ArtifactLeaseJournalError
from spillvault.domain.journal_records import (
    JournalLine,
    JournalRecord,
    decode_line_at,
    encode,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from spillvault.domain.ports import FileSystem

# Readable too (the boundary and torn-tail checks pread); O_NONBLOCK so a FIFO
# planted at the name fails to open instead of blocking us.
_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_BLOCK = 1 << 20
"""Bytes per read when reading or copying forwards."""
TAIL_BLOCK = 1 << 14
"""Bytes per read when scanning backwards for the last line (records are small)."""
_SUFFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class JournalTail:
    """The end of the journal: its last complete line and any torn tail after it."""

    size: int
    """The file's size (0 when it is missing)."""
    complete_end: int
    """The offset just past the last complete line (0 when there is none)."""
    last_offset: int | None
    """The offset where the last complete line starts, if there is one."""
    last_record: JournalRecord | None
    """The last complete line, decoded, if there is one."""

    @property
    def torn_length(self) -> int:
        """Bytes of the unterminated tail after `complete_end` (a torn append)."""
        return self.size - self.complete_end


class JournalFile:
    """One session's `retention-leases.jsonl`, reached through `fs` and `dir_fd`."""

    def __init__(
        self, fs: FileSystem, dir_fd: int, *, name: str = RETENTION_JOURNAL_NAME
    ) -> None:
        self._fs = fs
        self._dir_fd = dir_fd
        self._name = name
        self._poison: str | None = None

    @property
    def name(self) -> str:
        """The journal's name in the session directory."""
        return self._name

    @property
    def poisoned(self) -> bool:
        """Whether a write error has stopped this writer for good (J4)."""
        return self._poison is not None

    def torn_copy_name(self, offset: int, attempt: int = 1) -> str:
        """Return the name a torn tail starting at `offset` is copied aside to (J6)."""
        name = f"{self._name}.torn-{offset}"
        return name if attempt == 1 else f"{name}.{attempt}"

    def exists(self) -> bool:
        """Say whether anything (even a symlink) is at the journal's name."""
        return entry_exists(self._fs, self._name, dir_fd=self._dir_fd)

    # reading ----------------------------------------------------------------

    def read_from(self, offset: int, *, limit: int | None = None) -> bytes:
        """Return the bytes from `offset` on (at most `limit`); b"" if it is missing."""
        if offset < 0:
            msg = "offset must be >= 0"
            raise ValueError(msg)
        if limit is not None and limit < 0:
            msg = "limit must be >= 0"
            raise ValueError(msg)
        fd = self._open_for_read()
        if fd is None:
            return b""
        try:
            end = self._fs.fstat(fd).st_size
            if limit is not None:
                end = min(end, offset + limit)
            return b"".join(self._blocks(fd, offset, end))
        except OSError as error:
            raise self._read_error(error) from error
        finally:
            self._fs.close(fd)

    def last_complete(self) -> JournalTail:
        """Find and decode the last complete line, reading backwards from the end.

        Only the last line and the torn tail after it are read, whatever the
        journal's length. A damaged last line raises, naming its offset.
        """
        fd = self._open_for_read()
        if fd is None:
            return JournalTail(0, 0, None, None)
        try:
            size = self._fs.fstat(fd).st_size
            newline = self._rfind_newline(fd, size)
            if newline < 0:
                return JournalTail(size, 0, None, None)
            start = self._rfind_newline(fd, newline) + 1
            line = b"".join(self._blocks(fd, start, newline))
        except OSError as error:
            raise self._read_error(error) from error
        finally:
            self._fs.close(fd)
        record = decode_line_at(line, offset=start)
        return JournalTail(size, newline + 1, start, record)

    def _open_for_read(self) -> int | None:
        try:
            fd = self._fs.open(self._name, READ_FLAGS, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise self._open_error(error) from error
        self._check_ours(fd)
        return fd

    def _check_ours(self, fd: int) -> None:
        try:
            check_private(self._fs, fd, self._name, directory=False)
        except (ArtifactAccessError, OSError) as error:
            self._fs.close(fd)
            raise ArtifactLeaseJournalError(str(error)) from error

    def _blocks(self, fd: int, start: int, end: int) -> Iterator[bytes]:
        offset = start
        while offset < end:
            data = self._fs.pread(fd, min(_BLOCK, end - offset), offset)
            if not data:
                msg = f"{self._name} ended at offset {offset} while reading"
                raise ArtifactLeaseJournalError(msg)
            yield data
            offset += len(data)

    def _rfind_newline(self, fd: int, end: int) -> int:
        """Return the offset of the last newline before `end`, or -1."""
        while end > 0:
            start = max(0, end - TAIL_BLOCK)
            found = b"".join(self._blocks(fd, start, end)).rfind(b"\n")
            if found >= 0:
                return start + found
            end = start
        return -1

    def _open_error(
        self, error: OSError, name: str | None = None
    ) -> ArtifactLeaseJournalError:
        name = name or self._name
        if error.errno == errno.ELOOP:
            return ArtifactLeaseJournalError(f"{name} is a symlink")
        return ArtifactLeaseJournalError(f"cannot open {name}: {error}")

    def _read_error(self, error: OSError) -> ArtifactLeaseJournalError:
        return ArtifactLeaseJournalError(f"cannot read {self._name}: {error}")

    # appending (J3, J4, J6) --------------------------------------------------

    def append(self, records: Sequence[JournalRecord], *, expect_end: int) -> int:
        """Append whole lines after `expect_end`, fsync, and return the new end.

        `expect_end` is where the caller verified the last complete line ends.
        A torn tail after it is first copied aside and truncated (J6); a file
        that is shorter, or longer by complete lines (another writer), raises
        without writing: re-read it. A missing file is created (exclusive,
        0600, directory fsynced) only when `expect_end` is 0.
        """
        return self.append_lines(
            [encode(record) for record in records], expect_end=expect_end
        )

    def append_lines(self, lines: Sequence[JournalLine], *, expect_end: int) -> int:
        """Append records already encoded (`encode`, `RecordProjector.line`)."""
        self._check_healthy()
        if not lines:
            msg = "append needs at least one record"
            raise ValueError(msg)
        if expect_end < 0:
            msg = "expect_end must be >= 0"
            raise ValueError(msg)
        data = b"".join(lines)
        with self._poisoning():
            fd = self._open_for_append(expect_end)
            try:
                self._settle(fd, expect_end)
                write_all(self._fs, fd, data)
                self._fs.fsync(fd)
            finally:
                self._fs.close(fd)
        return expect_end + len(data)

    def _open_for_append(self, expect_end: int) -> int:
        try:
            fd = self._fs.open(self._name, _APPEND_FLAGS, dir_fd=self._dir_fd)
        except FileNotFoundError:
            if expect_end:
                msg = (
                    f"{self._name} is missing; expected {expect_end} bytes: re-read it"
                )
                raise ArtifactLeaseJournalError(msg) from None
            fd = create_private_file(self._fs, self._name, dir_fd=self._dir_fd)
            try:
                self._fs.fsync(self._dir_fd)
            except BaseException:
                self._fs.close(fd)
                raise
            return fd
        except OSError as error:
            raise self._open_error(error) from error
        self._check_ours(fd)
        return fd

    def _settle(self, fd: int, expect_end: int) -> None:
        """Make the file end at `expect_end`, keeping a torn tail aside, or raise."""
        size = self._fs.fstat(fd).st_size
        if size < expect_end:
            msg = (
                f"{self._name} is shorter ({size} bytes) than its verified part "
                f"({expect_end} bytes): re-read it"
            )
            raise ArtifactLeaseJournalError(msg)
        if expect_end and self._fs.pread(fd, 1, expect_end - 1) != b"\n":
            msg = f"offset {expect_end} is not the end of a line in {self._name}"
            raise ArtifactLeaseJournalError(msg)
        if size == expect_end:
            return
        if any(b"\n" in block for block in self._blocks(fd, expect_end, size)):
            msg = (
                f"{self._name} has complete lines after offset {expect_end} "
                "(another writer appended): re-read it"
            )
            raise ArtifactLeaseJournalError(msg)
        self._keep_aside(fd, expect_end, size)
        self._fs.ftruncate(fd, expect_end)
        self._fs.fsync(fd)

    def _keep_aside(self, fd: int, start: int, end: int) -> None:
        """Copy bytes `start:end` to a free torn-copy name, never overwriting one.

        A copy already holding the same bytes is a crash between an earlier
        copy and its truncation: nothing more to keep. A copy with other bytes
        is an earlier tear at the same offset, evidence too: this tail goes
        to the next free name (`.torn-<offset>.2`, `.3`, ...).
        """
        tmp = self._write_tmp(self._blocks(fd, start, end))
        try:
            for attempt in itertools.count(1):  # pragma: no branch - count() never ends
                aside = self.torn_copy_name(start, attempt)
                try:
                    self._link(tmp, aside)
                except FileExistsError:
                    if self._holds(aside, fd, start, end):
                        break
                    continue
                break
        finally:
            self._fs.unlink(tmp, dir_fd=self._dir_fd)
        self._fs.fsync(self._dir_fd)

    def _holds(self, name: str, fd: int, start: int, end: int) -> bool:
        """Say whether our file `name` holds exactly bytes `start:end` of `fd`."""
        try:
            other = self._fs.open(name, READ_FLAGS, dir_fd=self._dir_fd)
        except OSError as error:
            raise self._open_error(error, name) from error
        try:
            check_private(self._fs, other, name, directory=False)
            if self._fs.fstat(other).st_size != end - start:
                return False
            theirs = b"".join(self._blocks(other, 0, end - start))
        except ArtifactAccessError as error:
            raise ArtifactLeaseJournalError(str(error)) from error
        finally:
            self._fs.close(other)
        return theirs == b"".join(self._blocks(fd, start, end))

    # repair (J7) -------------------------------------------------------------

    def replace_with(
        self, records: Sequence[JournalRecord], *, keep_aside_suffix: str
    ) -> int:
        """Replace the journal by `records`, keeping the old one aside; return the size.

        The rebuilt journal is written to a fresh tmp file and fsynced; the
        current journal (if any) is hard-linked to `<name>.<keep_aside_suffix>`
        (which must not exist), the tmp renamed over the journal, and the
        directory fsynced. Readers see the old or the new journal, never a mix.
        """
        self._check_healthy()
        if not _SUFFIX.fullmatch(keep_aside_suffix):
            msg = (
                "keep_aside_suffix must be 1-128 letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit, not {keep_aside_suffix!r}"
            )
            raise ValueError(msg)
        aside = f"{self._name}.{keep_aside_suffix}"
        data = b"".join(encode(record) for record in records)
        current = self._open_for_read()
        try:
            if current is not None and entry_exists(
                self._fs, aside, dir_fd=self._dir_fd
            ):
                msg = f"{aside} already exists: choose another suffix"
                raise ArtifactLeaseJournalError(msg)
            with self._poisoning():
                self._swap_in(data, current, aside)
        finally:
            if current is not None:
                self._fs.close(current)
        return len(data)

    def _swap_in(self, data: bytes, current: int | None, aside: str) -> None:
        tmp = self._write_tmp([data])
        try:
            if current is None:
                # No journal to keep: link, so one that appeared meanwhile stays.
                self._link(tmp, self._name)
                self._fs.unlink(tmp, dir_fd=self._dir_fd)
            else:
                self._link(self._name, aside)
                self._check_same_file(aside, current)
                self._fs.rename(
                    tmp, self._name, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd
                )
        except BaseException:
            with suppress(OSError):
                self._fs.unlink(tmp, dir_fd=self._dir_fd)
            raise
        self._fs.fsync(self._dir_fd)

    def _check_same_file(self, name: str, fd: int) -> None:
        linked = self._fs.lstat(name, dir_fd=self._dir_fd)
        checked = self._fs.fstat(fd)
        if (linked.st_dev, linked.st_ino) != (checked.st_dev, checked.st_ino):
            msg = f"{self._name} changed while it was being kept aside as {name}"
            raise ArtifactLeaseJournalError(msg)

    # shared write idioms -----------------------------------------------------

    def _write_tmp(self, chunks: Iterable[bytes]) -> str:
        """Write `chunks` to a fresh private tmp file, fsync it, return its name."""
        tmp = tmp_name_for(self._name)
        fd = create_private_file(self._fs, tmp, dir_fd=self._dir_fd)
        try:
            for chunk in chunks:
                write_all(self._fs, fd, chunk)
            self._fs.fsync(fd)
        except BaseException:
            with suppress(OSError):
                self._fs.unlink(tmp, dir_fd=self._dir_fd)
            raise
        finally:
            self._fs.close(fd)
        return tmp

    def _link(self, src: str, dst: str) -> None:
        self._fs.link(src, dst, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)

    def _check_healthy(self) -> None:
        if self._poison is not None:
            msg = f"journal writer poisoned: {self._poison}"
            raise ArtifactLeaseJournalError(msg)

    @contextmanager
    def _poisoning(self) -> Iterator[None]:
        """Turn any OS error inside into a poisoned writer (J4)."""
        try:
            yield
        except OSError as error:
            self._poison = str(error) or type(error).__name__
            msg = f"journal writer poisoned: {self._poison}"
            raise ArtifactLeaseJournalError(msg) from error


__all__ = ["TAIL_BLOCK", "JournalFile", "JournalTail"]
