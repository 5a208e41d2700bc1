"""Ports: what the domain needs from the world, as Protocols (cosmicpython style)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Iterable
    from contextlib import AbstractContextManager
    from datetime import datetime

    from .artifact import Artifact
    from .values import (
        ArtifactLeaseTransaction,
        ArtifactMemoryReference,
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


class ArtifactStore(Protocol):
    """The storage port (S2.7): store bytes, open them for reading, hint retrieval.

    A handle is opaque (S1.5): only the backend that issued it parses it.
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
    ) -> Artifact:
        """Store a whole output and record it; raise (leaving nothing) on failure."""
        ...

    def handle_for(self, filename: str) -> str:
        """Return this backend's handle for an artifact filename."""
        ...

    def resolve(self, handle: str) -> str:
        """Return the filename a handle of this backend names; raise for others."""
        ...

    def open_for_read(self, handle: str) -> int:
        """Open an artifact of this backend for reading; raise for foreign handles."""
        ...

    def hint(self, handle: str) -> str:
        """Return the backend's retrieval hint for a handle."""
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
