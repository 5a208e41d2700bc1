"""Ports: what the domain needs from the world, as Protocols (cosmicpython style)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import AbstractContextManager
    from datetime import datetime
    from types import TracebackType

    from .artifact import Artifact, ArtifactContent
    from .command import CommandFacts
    from .values import (
        ArtifactLeaseTransaction,
        ArtifactMemoryReference,
        ArtifactReference,
        ArtifactReferenceObservation,
    )


class Clock(Protocol):
    """Tells the time; tests pass a fake."""

    def now(self) -> datetime:
        """Return the current aware UTC time."""
        ...


class StatResult(Protocol):
    """The fields of `os.stat_result` the project reads."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_ino(self) -> int: ...
    @property
    def st_dev(self) -> int: ...
    @property
    def st_nlink(self) -> int: ...
    @property
    def st_uid(self) -> int: ...
    @property
    def st_size(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...


class FileSystem(Protocol):
    """The filesystem seam (S2.7): every durable file operation goes through it."""

    def open(
        self, path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None
    ) -> int:
        """Open `path` (relative to `dir_fd`) and return a file descriptor."""
        ...

    def close(self, fd: int) -> None:
        """Close a descriptor."""
        ...

    def read(self, fd: int, size: int) -> bytes:
        """Read at most `size` bytes."""
        ...

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """Read at most `size` bytes at `offset`."""
        ...

    def write(self, fd: int, data: bytes) -> int:
        """Write some of `data`; return how much (callers loop on short writes)."""
        ...

    def fsync(self, fd: int) -> None:
        """Flush a file or directory to stable storage."""
        ...

    def ftruncate(self, fd: int, length: int) -> None:
        """Cut a file to `length` bytes."""
        ...

    def fstat(self, fd: int) -> StatResult:
        """Stat an open descriptor."""
        ...

    def fchmod(self, fd: int, mode: int) -> None:
        """Set the mode of an open descriptor."""
        ...

    def lstat(self, path: str, *, dir_fd: int | None = None) -> StatResult:
        """Stat without following a final symlink."""
        ...

    def mkdir(self, path: str, mode: int = 0o700, *, dir_fd: int | None = None) -> None:
        """Create a directory."""
        ...

    def link(
        self,
        src: str,
        dst: str,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        """Hard-link `src` to `dst` without following symlinks (A3)."""
        ...

    def rename(
        self,
        src: str,
        dst: str,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        """Rename within one filesystem."""
        ...

    def unlink(self, path: str, *, dir_fd: int | None = None) -> None:
        """Remove a directory entry."""
        ...

    def rmdir(self, path: str, *, dir_fd: int | None = None) -> None:
        """Remove an empty directory."""
        ...

    def listdir(self, fd: int) -> list[str]:
        """List the names in an open directory."""
        ...

    def flock(self, fd: int, operation: int) -> None:
        """Take or drop an advisory lock on an open descriptor."""
        ...


class KeyLineScanner(Protocol):
    """Sees every stored chunk, in order, to pick key lines for the preview (S1.6)."""

    def feed(self, chunk: bytes, newlines: int | None = None) -> None:
        """Look at the next chunk of stored bytes (and its newline count, if known)."""
        ...


class ArtifactBlob(Protocol):
    """One stored artifact opened for reading: its size, and bytes at any offset."""

    @property
    def size(self) -> int:
        """How many bytes the artifact holds, as the backend found it at open."""
        ...

    def read_at(self, offset: int, size: int) -> bytes:
        """Return at most `size` bytes from `offset` (fewer only at the end)."""
        ...

    def close(self) -> None:
        """Release what reading held (idempotent)."""
        ...


class ArtifactReadPort(Protocol):
    """What reading an artifact needs of its store: resolve a handle, open it."""

    def resolve(self, handle: str) -> str:
        """Return the filename a handle of this backend names; raise for others."""
        ...

    def open_for_read(self, handle: str) -> ArtifactBlob:
        """Open an artifact of this backend for reading (A4)."""
        ...

    def confirm(self, filename: str, content: ArtifactContent) -> None:
        """Demand the stored bytes are `content`; raise when missing or changed.

        `FileNotFoundError` when they are gone, `ArtifactIntegrityError` when
        they differ. How a backend checks is its own: the local store hashes
        the file, an object store compares the checksum the server verified.
        """
        ...


class ArtifactStream(Protocol):
    """An artifact being written chunk by chunk, recorded `open` (S2.4)."""

    @property
    def artifact(self) -> Artifact:
        """The artifact as recorded so far."""
        ...

    @property
    def filename(self) -> str:
        """The artifact's filename."""
        ...

    @property
    def handle(self) -> str:
        """The handle the artifact will be read back by."""
        ...

    @property
    def size(self) -> int:
        """How many bytes were written so far."""
        ...

    @property
    def closed(self) -> bool:
        """Tell whether the stream was sealed."""
        ...

    def write(self, data: bytes) -> None:
        """Append `data` to the artifact."""
        ...

    def close(self, *, command: CommandFacts | None = None) -> Artifact:
        """Seal the artifact with the digest of what was written (and `command`)."""
        ...

    def fail(self, *, command: CommandFacts | None = None) -> Artifact:
        """Seal what was written as partial after a failure (and `command`)."""
        ...

    def __enter__(self) -> Self:
        """Return the stream."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Seal the stream: whole without an exception, partial with one."""
        ...


class ArtifactStore(ArtifactReadPort, Protocol):
    """The storage port (S2.7): store bytes, open them for reading, hint retrieval.

    A handle is opaque (S1.5): only the backend that issued it parses it. The
    services see artifact storage only through this port.
    """

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
        """Store a whole output and record it; raise (leaving nothing) on failure."""
        ...

    def open_stream(
        self,
        source_tool: str,
        *,
        tool_use_id: str | None = None,
        key_line_scanner: KeyLineScanner | None = None,
    ) -> ArtifactStream:
        """Create an artifact to be written chunk by chunk, recorded `open`."""
        ...

    def handle_for(self, filename: str) -> str:
        """Return this backend's handle for an artifact filename."""
        ...

    def longest_handle(self) -> str:
        """Return a handle at least as long as any this backend will issue."""
        ...

    def hint(self, handle: str) -> str:
        """Return the backend's retrieval hint for a handle."""
        ...

    def reference_for(self, artifact: Artifact) -> ArtifactReference:
        """Return the S4.1 reference of a stored (not open) artifact."""
        ...

    def close(self) -> None:
        """Release what the store holds open (idempotent)."""
        ...


class ArtifactReferenceFence(Protocol):
    """An exclusive fence over one transaction id at an owner (S5.1)."""

    @property
    def observation(self) -> ArtifactReferenceObservation:
        """What the owner holds for the transaction id, read under the fence."""
        ...

    def seal_absent(self) -> ArtifactReferenceObservation:
        """Tombstone the id by CAS, advancing the generation; return the seal."""
        ...


@runtime_checkable
class ArtifactReferenceOwner(Protocol):
    """A memory system that holds artifact references (S5.1)."""

    def inspect_fenced(
        self, transaction: ArtifactLeaseTransaction
    ) -> AbstractContextManager[ArtifactReferenceFence]:
        """Hold an exclusive fence for the transaction id while deciding."""
        ...

    def publish(
        self, transaction_id: str, memory_reference: ArtifactMemoryReference
    ) -> object:
        """Write the reference under the transaction id (refused once tombstoned)."""
        ...

    def remove(self, transaction_id: str) -> None:
        """Delete the reference held under the transaction id."""
        ...
