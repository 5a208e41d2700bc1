"""The local artifact store: the default storage backend (S2, A1-A4, S3.2).

A whole output is streamed into a private `.tmp-*` file (flocked while it is
written, so another process's recovery pass leaves it alone, S2.6), hashed on
the way (whole SHA-256, per-1-MiB chunk digests and newline counts, S2.5),
fsynced, then published without overwrite: a number from the store's counter,
`link` (EEXIST: the next number), fsync the directory, record the event, unlink
the tmp, fsync again (A3). Any failure before the event is recorded removes
what was written and raises; the gate turns that into `store_failed`.

A streaming artifact is created under its final name, recorded `open`, and
sealed (or sealed `partial` over the bytes on disk) when it ends.

Handles are `<session-id>/<number>` (see `domain.handles`) and are resolved
only here; `resolve` also takes an artifact's source id and absolute path.
Every durable file operation goes through `session.fs`, the seam (S2.7).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import secrets
import stat
import weakref
from contextlib import closing, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Self

from spillvault.adapters.storage.artifact_names import SessionArtifactNames
from spillvault.adapters.storage.content_writer import (
    ContentWriter,
    digest_open_file,
    summary_for,
)
from spillvault.adapters.storage.fs import (
    EXCLUSIVE_CREATE,
    PRIVATE_FILE_MODE,
    READ_FLAGS,
    check_private,
    open_private_dir,
)
from spillvault.adapters.storage.layout import TOOL_RESULTS_DIR
from spillvault.domain.artifact import Artifact
from spillvault.domain.errors import ArtifactAccessError, ArtifactIntegrityError
from spillvault.domain.handles import (
    MAX_ARTIFACT_DIGITS,
    MAX_ARTIFACT_NUMBER,
)
from spillvault.domain.summary import check_summary
from spillvault.domain.values import (
    ArtifactReference,
    artifact_filename,
    artifact_number,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType

    from spillvault.adapters.storage.handles import SessionHandles
    from spillvault.domain.artifact import ArtifactContent
    from spillvault.domain.command import CommandFacts
    from spillvault.domain.ports import FileSystem, KeyLineScanner

logger = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
_NAME_ATTEMPTS = 64
_CREATE_READABLE = (EXCLUSIVE_CREATE & ~os.O_WRONLY) | os.O_RDWR
"""Readable too: after a failed write the file is hashed back from disk."""


def _as_bytes(chunk: object) -> bytes:
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, bytearray | memoryview):
        return bytes(chunk)
    msg = f"artifact chunks must be bytes, not {type(chunk).__name__}"
    raise TypeError(msg)


class LocalArtifactStore(SessionArtifactNames):
    """Artifacts as private files in `<session>/tool-results/` (S2.1)."""

    def __init__(self, session: SessionHandles) -> None:
        self._session = session
        self._fs = session.fs
        self.tool_results_dir = os.path.join(session.path, TOOL_RESULTS_DIR)
        self._dir_fd = open_private_dir(
            self._fs,
            TOOL_RESULTS_DIR,
            dir_fd=session.dir_fd,
            what="tool-results directory",
            create=not session.read_only,
        )
        self._closer = weakref.finalize(self, self._fs.close, self._dir_fd)
        self._floor: int | None = None  # set once a name is found taken

    # life cycle -------------------------------------------------------------

    @property
    def session(self) -> SessionHandles:
        """The session this store writes into."""
        return self._session

    @property
    def dir_fd(self) -> int:
        """The checked descriptor of `tool-results/` (for readers of this session)."""
        self._check_open()
        return self._dir_fd

    def close(self) -> None:
        """Close the directory descriptor (idempotent)."""
        self._closer()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if not self._closer.alive:
            msg = "artifact store is closed"
            raise ValueError(msg)

    # handles (S1.5, S3.2) ---------------------------------------------------

    def resolve(self, handle: str) -> str:
        """Return the filename `handle` names, if it is an artifact of this session.

        Accepted: the handle `<session-id>/<number>`, and as aliases the
        artifact's source id (S2.3) and its absolute path. Other sessions'
        handles, `..`, other directories, NUL bytes, non-canonical names and
        entries that are symlinks or not regular files raise
        `ArtifactAccessError`. A missing file is not an access error: the
        caller finds out when it opens it.
        """
        filename = self._parse(handle)
        try:
            info = self._fs.lstat(filename, dir_fd=self.dir_fd)
        except FileNotFoundError:
            return filename
        if not stat.S_ISREG(info.st_mode):
            msg = f"{filename} is a symlink or not a regular file"
            raise ArtifactAccessError(msg)
        return filename

    def _parse_path(self, handle: str) -> str:
        directory, _, filename = handle.rpartition("/")
        if directory != self.tool_results_dir:
            msg = f"artifact path is outside the session: {handle[:300]!r}"
            raise ArtifactAccessError(msg)
        if artifact_number(filename) is None:
            msg = f"not a canonical artifact name: {filename[:300]!r}"
            raise ArtifactAccessError(msg)
        return filename

    def open_for_read(self, handle_or_filename: str) -> FileBlob:
        """Open an artifact read-only per A4; the caller closes the blob.

        Accepts a handle of this store or a bare canonical filename. Opening is
        `O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC` relative to the checked
        tool-results descriptor (a FIFO never blocks), then `fstat` demands an
        owned, private regular file. A missing file raises `FileNotFoundError`.
        """
        filename = self._parse_name(handle_or_filename)
        fd = open_artifact_file(self._fs, filename, dir_fd=self.dir_fd)
        try:
            return FileBlob(self._fs, fd)
        except BaseException:
            self._fs.close(fd)
            raise

    def confirm(self, filename: str, content: ArtifactContent) -> None:
        """Hash the file whole; raise unless it is exactly `content` (S4.6)."""
        with closing(self.open_for_read(filename)) as blob:
            digest, size = digest_open_file(self._fs, blob.fd)
        if (digest, size) != (content.content_sha256, content.size_bytes):
            msg = f"{filename} changed on disk: it is not the recorded content"
            raise ArtifactIntegrityError(msg)

    def reference_for(self, artifact: Artifact) -> ArtifactReference:
        """Return the S4.1 reference of a stored (not open) artifact."""
        return self._reference(artifact, Path(self.tool_results_dir, artifact.filename))

    # storing a whole output (S2.4, A2, A3) ----------------------------------

    def store(  # noqa: PLR0913 - the fields S2.3 records
        self,
        chunks: Iterable[bytes],
        *,
        source_tool: str,
        tool_use_id: str | None = None,
        is_error: bool = False,
        summary: str | None = None,
        key_line_scanner: KeyLineScanner | None = None,
        command: CommandFacts | None = None,
    ) -> Artifact:
        """Store the bytes of `chunks` as a new sealed artifact and record it.

        `command` is what the command that produced them did, when one did.
        A caller's summary is validated before any file exists. On any failure
        nothing is left behind (no tmp, no final name, no event) and the error
        propagates.
        """
        if summary is not None:
            summary = check_summary(summary)
        self._check_open()
        self._session.check_writable("store an artifact")
        captured_at = self._session.clock.now()
        fd, tmp = self._create_tmp()
        final: str | None = None
        writer = ContentWriter(self._fs, fd, key_line_scanner)
        try:
            for chunk in chunks:
                writer.write(_as_bytes(chunk))
            writer.close()
            self._fs.fsync(fd)
            content, first_line = writer.content()
            final = self._link_fresh_name(tmp)
            self._fs.fsync(self._dir_fd)
            artifact = Artifact.store(
                final,
                content,
                source_tool=source_tool,
                tool_use_id=tool_use_id,
                is_error=is_error,
                captured_at=captured_at,
                summary=summary or summary_for(content, first_line),
                command=command,
            )
            self._session.store.save_aggregates(artifact)
        except BaseException:
            writer.close()
            self._discard(fd, tmp, final)
            raise
        try:
            self._fs.unlink(tmp, dir_fd=self._dir_fd)
            self._fs.fsync(self._dir_fd)
        except OSError as error:
            # The artifact is linked, fsynced and recorded: it is stored. The
            # leftover tmp is removed by the next recovery pass (S2.6).
            logger.warning("artifact %s stored; tmp cleanup failed: %s", final, error)
        finally:
            with suppress(OSError):
                self._fs.close(fd)
        return artifact

    def _create_tmp(self) -> tuple[int, str]:
        """Create and flock a fresh `.tmp-*` file that recovery cannot take."""
        for _ in range(_NAME_ATTEMPTS):
            name = TMP_PREFIX + secrets.token_hex(8)
            try:
                fd = self._create_locked(name)
            except FileExistsError:
                continue
            # A recovery pass may have flocked and removed the file between our
            # create and our flock; it unlinks only while holding the flock, so
            # once we hold it the name is ours if it still names our inode.
            if self._names_fd(name, fd):
                return fd, name
            self._fs.close(fd)
        raise OSError(errno.EEXIST, "no fresh tmp name in tool-results")

    def _create_locked(self, name: str) -> int:
        """Create `name` exclusively 0600 (A2) and flock it; on failure remove it.

        Like `fs.create_private_file`, plus the writer's flock (S2.6) and the
        removal of the just-created entry when chmod or flock fails.
        """
        fd = self._fs.open(
            name, _CREATE_READABLE, PRIVATE_FILE_MODE, dir_fd=self._dir_fd
        )
        try:
            self._fs.fchmod(fd, PRIVATE_FILE_MODE)
            self._fs.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            with suppress(OSError):
                self._fs.unlink(name, dir_fd=self._dir_fd)
            self._fs.close(fd)
            raise
        return fd

    def _names_fd(self, name: str, fd: int) -> bool:
        try:
            entry = self._fs.lstat(name, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return False
        info = self._fs.fstat(fd)
        return (entry.st_dev, entry.st_ino) == (info.st_dev, info.st_ino)

    def _next_floor(self) -> int:
        """Return the lowest number worth reserving, as far as this store knows (S2.2).

        The counter in the event store is above every name any writer of the
        session made, so the directory is listed only when a reserved name is
        found taken anyway (a copied-in file, a restored event store), and
        then once: listing per store made every spill cost O(artifacts).
        """
        return self._floor or 1

    def _taken(self, name: str) -> None:
        """Skip past `name`, found on disk: above every name there, the first time."""
        if self._floor is None:
            numbers = (artifact_number(n) for n in self._fs.listdir(self._dir_fd))
            self._floor = max((n for n in numbers if n is not None), default=0) + 1
        self._floor = max(self._floor, (artifact_number(name) or 0) + 1)

    def _reserve(self, at_least: int) -> str:
        number = self._session.store.reserve_artifact_number(at_least=at_least)
        if number > MAX_ARTIFACT_NUMBER:
            msg = f"artifact numbers exhausted ({number} > {MAX_ARTIFACT_NUMBER})"
            raise OSError(errno.ENOSPC, msg)
        return artifact_filename(number)

    def _link_fresh_name(self, tmp: str) -> str:
        """Publish `tmp` under a never-used name without overwriting (A3)."""
        at_least = self._next_floor()
        for _ in range(_NAME_ATTEMPTS):
            final = self._reserve(at_least)
            try:
                self._fs.link(
                    tmp, final, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd
                )
            except FileExistsError:
                self._taken(final)
                at_least = self._next_floor()
                continue
            return final
        raise OSError(errno.EEXIST, "every reserved artifact name was taken")

    def _discard(self, fd: int, tmp: str | None, final: str | None) -> None:
        """Remove what a failed write left (only entries still naming our file)."""
        removed = False
        for name in (final, tmp):
            if name is None:
                continue
            with suppress(OSError):
                if self._names_fd(name, fd):
                    self._fs.unlink(name, dir_fd=self._dir_fd)
                    removed = True
        if removed:
            with suppress(OSError):
                self._fs.fsync(self._dir_fd)
        with suppress(OSError):
            self._fs.close(fd)

    # streaming (S2.4) -------------------------------------------------------

    def open_stream(
        self,
        source_tool: str,
        *,
        tool_use_id: str | None = None,
        key_line_scanner: KeyLineScanner | None = None,
    ) -> ArtifactStream:
        """Create a streaming artifact under its final name, recorded `open`."""
        self._check_open()
        self._session.check_writable("store an artifact")
        opened_at = self._session.clock.now()
        fd, final = self._create_final()
        try:
            self._fs.fsync(self._dir_fd)
            artifact = Artifact.open_stream(
                final,
                source_tool=source_tool,
                tool_use_id=tool_use_id,
                opened_at=opened_at,
            )
            self._session.store.save_aggregates(artifact)
        except BaseException:
            self._discard(fd, None, final)
            raise
        return ArtifactStream(self, fd, artifact, key_line_scanner)

    def _create_final(self) -> tuple[int, str]:
        at_least = self._next_floor()
        for _ in range(_NAME_ATTEMPTS):
            final = self._reserve(at_least)
            try:
                fd = self._create_locked(final)
            except FileExistsError:
                self._taken(final)
                at_least = self._next_floor()
                continue
            return fd, final
        raise OSError(errno.EEXIST, "every reserved artifact name was taken")


class ArtifactStream:
    """A streaming artifact being written; readable by name while open (S2.4).

    `close()` seals it; `fail()` (or leaving a `with` block by an exception)
    seals what was stored as `partial`. When a write or the final fsync fails,
    the stream seals `partial` over the bytes on disk, then the error
    propagates; `artifact` is then the partial artifact (still `open` if even
    that seal could not be recorded: the next recovery pass seals it).
    """

    def __init__(
        self,
        owner: LocalArtifactStore,
        fd: int,
        artifact: Artifact,
        key_line_scanner: KeyLineScanner | None,
    ) -> None:
        self._owner = owner
        self._fs = owner.session.fs
        self._fd: int | None = fd
        self._artifact = artifact
        self._writer = ContentWriter(self._fs, fd, key_line_scanner)

    @property
    def artifact(self) -> Artifact:
        """The artifact as last recorded."""
        return self._artifact

    @property
    def filename(self) -> str:
        """The artifact's filename."""
        return self._artifact.filename

    @property
    def handle(self) -> str:
        """The artifact's handle."""
        return self._owner.handle_for(self._artifact.filename)

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._writer.size

    @property
    def closed(self) -> bool:
        """Whether the stream was sealed (or gave up)."""
        return self._fd is None

    def write(self, data: bytes) -> None:
        """Append `data` verbatim."""
        self._writable()
        try:
            self._writer.write(_as_bytes(data))
        except OSError:
            self._seal_quietly(partial=True)
            raise

    def close(self, *, command: CommandFacts | None = None) -> Artifact:
        """Seal the artifact with its digest (and `command`); idempotent once sealed."""
        if self._fd is None:
            return self._artifact
        try:
            self._fs.fsync(self._fd)
            self._fs.fsync(self._owner.dir_fd)
        except OSError:
            self._seal_quietly(partial=True, command=command)
            raise
        return self._seal(partial=False, command=command)

    def fail(self, *, command: CommandFacts | None = None) -> Artifact:
        """Seal what was stored as `partial` (and `command`); idempotent once sealed."""
        if self._fd is None:
            return self._artifact
        with suppress(OSError):
            self._fs.fsync(self._fd)
        return self._seal(partial=True, command=command)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            self._seal_quietly(partial=True)

    def _writable(self) -> int:
        if self._fd is None:
            msg = f"stream {self.filename} is already sealed"
            raise ValueError(msg)
        return self._fd

    def _seal(self, *, partial: bool, command: CommandFacts | None = None) -> Artifact:
        fd = self._writable()
        session = self._owner.session
        try:
            self._writer.close()
            content, first_line = self._writer.content()
            summary = summary_for(content, first_line)
            at = session.clock.now()
            seal = self._artifact.seal_partial if partial else self._artifact.seal
            seal(content, summary=summary, sealed_at=at, command=command)
            session.store.save_aggregates(self._artifact)
        except BaseException:
            # The aggregate may hold an unsaved event: reload what is recorded.
            with suppress(Exception):
                recorded = session.store.get_artifact(self.filename)
                if recorded is not None:
                    self._artifact = recorded
            raise
        finally:
            # Only now may a recovery pass take the file (S2.6).
            self._fd = None
            self._fs.close(fd)
        return self._artifact

    def _seal_quietly(
        self, *, partial: bool, command: CommandFacts | None = None
    ) -> None:
        if self._fd is None:
            return
        try:
            self._seal(partial=partial, command=command)
        except Exception as error:  # noqa: BLE001 - the caller's error wins
            logger.warning(
                "stream %s could not be sealed partial (%s); recovery will seal it",
                self.filename,
                error,
            )


class FileBlob:
    """An artifact file open for reading: `pread` through the seam (S2.7)."""

    def __init__(self, fs: FileSystem, fd: int) -> None:
        self._fs = fs
        self.fd = fd
        self.size = fs.fstat(fd).st_size
        self._closed = False

    def read_at(self, offset: int, size: int) -> bytes:
        """Return at most `size` bytes at `offset`, looping over short reads."""
        parts: list[bytes] = []
        got = 0
        while got < size:
            part = self._fs.pread(self.fd, size - got, offset + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if not self._closed:
            self._closed = True
            self._fs.close(self.fd)


def open_artifact_file(fs: FileSystem, filename: str, *, dir_fd: int) -> int:
    """Open an artifact per A4 and demand an owned, private regular file."""
    try:
        fd = fs.open(filename, READ_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            msg = f"{filename} is a symlink"
            raise ArtifactAccessError(msg) from error
        raise
    try:
        check_private(fs, fd, filename, directory=False)
    except BaseException:
        fs.close(fd)
        raise
    return fd


__all__ = [
    "MAX_ARTIFACT_DIGITS",
    "TMP_PREFIX",
    "ArtifactStream",
    "FileBlob",
    "LocalArtifactStore",
    "open_artifact_file",
]
