"""`SessionHandles`: what an open session lends its services (S4.4).

The directory fd, the event store, the lock, the filesystem seam and the
clock of one session, and its policy. The composition root
(`spillvault.adapters.session`) opens them and hands them to every service;
services type against this class and never open a session themselves.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Self, TypeVar, cast

from spillvault.adapters.storage.journal_file import JournalFile
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactSessionReadOnlyError,
)
from spillvault.domain.safeguards import Safeguards

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from spillvault.adapters.storage.advisory_lock import AdvisoryLock
    from spillvault.adapters.storage.eventstore import SessionStore
    from spillvault.adapters.storage.journal_table import JournalTable
    from spillvault.adapters.storage.s3_client import ObjectLocation
    from spillvault.adapters.storage.session_lock import SessionLock
    from spillvault.domain.policy import SpillPolicy
    from spillvault.domain.ports import Clock, FileSystem

logger = logging.getLogger(__name__)


class SavedView(Protocol):
    """A cache of the event log that is saved when its session closes."""

    def save(self) -> None:
        """Write the view out; a failure only costs a longer replay next time."""


ViewT = TypeVar("ViewT", bound=SavedView)


@dataclass
class SessionHandles:
    """An open session's directory, store and lock, shared by what uses them.

    A session of a vault (`artifacts` set) has no directory: `dir_fd` is -1,
    `path` names its place in the object store, its lock is a PostgreSQL
    advisory lock and its journal a table (`open_journal`).
    """

    path: str
    session_id: str
    store_id: str
    store_kind: str
    store: SessionStore
    lock: SessionLock | AdvisoryLock
    fs: FileSystem
    clock: Clock
    dir_fd: int
    policy: SpillPolicy | None = None
    safeguards: Safeguards = field(default_factory=Safeguards)
    read_only: bool = False
    artifacts: ObjectLocation | None = None
    """Where a vault session's artifacts are; None: `tool-results/` on disk."""
    journal_opener: Callable[[], JournalTable] | None = field(default=None, repr=False)
    closed: bool = field(default=False, init=False)
    _view: SavedView | None = field(default=None, init=False, repr=False)
    _closers: list[Callable[[], None]] = field(
        default_factory=list, init=False, repr=False
    )

    def read_only_error(self, action: str) -> ArtifactSessionReadOnlyError:
        """Return the error refusing `action` on this read-only view."""
        msg = f"session {self.path} is opened read-only: cannot {action}"
        return ArtifactSessionReadOnlyError(msg)

    def check_writable(self, action: str) -> None:
        """Refuse `action` before it starts when this is a read-only view."""
        if self.read_only:
            raise self.read_only_error(action)

    def lease_projection(self, create: Callable[[], ViewT]) -> ViewT:
        """Return the session's one lease projection, made on first use."""
        if self._view is None:
            self._view = create()
        return cast("ViewT", self._view)

    def close(self) -> None:
        """Save the lease view; close the store and the directory fd (idempotent)."""
        if self.closed:
            return
        try:
            if self._view is not None:
                self._view.save()
        except (OSError, ArtifactLeaseJournalError) as error:
            # The view is a cache of the event log: the next open replays more.
            logger.warning("lease view not saved at close: %s", error)
        finally:
            self._close_resources()

    def open_journal(self) -> JournalFile | JournalTable:
        """Return the session's journal: its file, or a vault session's table."""
        if self.journal_opener is None:
            return JournalFile(self.fs, self.dir_fd)
        table = self.journal_opener()
        self._closers.append(table.close)  # its connection goes with the session
        return table

    def _close_resources(self) -> None:
        self.closed = True
        for close in self._closers:
            close()
        self.store.close()
        if self.dir_fd >= 0:
            self.fs.close(self.dir_fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["SavedView", "SessionHandles"]
