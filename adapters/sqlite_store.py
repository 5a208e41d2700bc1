"""The embedded default event store: `events.sqlite3` in the session dir (S4.4)."""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING
from urllib.parse import quote

from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory

from spillvault.domain.errors import ArtifactAccessError, ArtifactLeaseJournalError

from .eventstore import SessionStore
from .fs import READ_FLAGS, check_private, create_private_file

if TYPE_CHECKING:
    from eventsourcing.utils import Environment

    from spillvault.domain.ports import FileSystem

STORE_NAME = "events.sqlite3"
LOCK_TIMEOUT_SECONDS = 30


class FullSyncConnectionPool(SQLiteConnectionPool):
    """Connections that fsync every commit (WAL with `synchronous=FULL`)."""

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection.cursor().execute("PRAGMA synchronous=FULL;")
        return connection


class FullSyncSQLiteFactory(SQLiteFactory):
    """eventsourcing's SQLite module with durable commits whatever the build default."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        stock = self.datastore.pool
        self.datastore.pool = FullSyncConnectionPool(
            db_name=stock.db_name, lock_timeout=stock.lock_timeout
        )
        stock.close()


class SQLiteBackend:
    """Locates, creates and opens a session's SQLite store; never re-creates it."""

    kind = "sqlite"

    def __init__(self, fs: FileSystem, dir_fd: int, session_path: str) -> None:
        self._fs = fs
        self._dir_fd = dir_fd
        self._session_path = session_path
        self._path = f"{session_path}/{STORE_NAME}"

    def describe(self) -> str:
        """Name the store for messages."""
        return STORE_NAME

    def exists(self) -> bool:
        """Say whether the store file exists; a non-regular entry is refused."""
        try:
            info = self._fs.lstat(STORE_NAME, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(info.st_mode):
            msg = f"{STORE_NAME} is not a regular file (symlink or special)"
            raise ArtifactAccessError(msg)
        return True

    def create(self) -> None:
        """Pre-create the file 0600 with O_EXCL|O_NOFOLLOW, then fsync the directory."""
        fd = create_private_file(self._fs, STORE_NAME, dir_fd=self._dir_fd)
        try:
            self._fs.fsync(fd)
        finally:
            self._fs.close(fd)
        self._fs.fsync(self._dir_fd)

    def open(self) -> SessionStore:
        """Open the existing file (mode=rw: a missing file is never re-created)."""
        fd = self._fs.open(STORE_NAME, READ_FLAGS, dir_fd=self._dir_fd)
        try:
            check_private(self._fs, fd, STORE_NAME, directory=False)
        finally:
            self._fs.close(fd)
        uri = f"file:{quote(self._path)}?mode=rw"
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": uri,
            "SQLITE_LOCK_TIMEOUT": str(LOCK_TIMEOUT_SECONDS),
        }
        try:
            return SessionStore(env, factory=FullSyncSQLiteFactory)
        except ArtifactLeaseJournalError as error:
            # SQLite says "disk I/O error" or "unable to open database file"
            # when it cannot create its -wal/-shm files: name the real cause.
            cause = self._diagnose()
            if cause is None:
                raise
            msg = f"{error} ({cause.strerror})"
            raise ArtifactLeaseJournalError(msg) from cause

    def _diagnose(self) -> OSError | None:
        """Return why the session directory refuses new files, if it visibly does."""
        info = os.fstatvfs(self._dir_fd)
        if info.f_flag & os.ST_RDONLY:
            code, what = errno.EROFS, "the session directory is on a read-only mount"
        elif info.f_bavail == 0:
            code, what = errno.ENOSPC, "no space left for the store's WAL files"
        elif info.f_favail == 0:
            code, what = errno.ENOSPC, "no inodes left for the store's WAL files"
        elif not os.access(self._session_path, os.W_OK):
            code, what = errno.EACCES, "the session directory is not writable"
        else:
            return None
        return OSError(code, f"{os.strerror(code)}: {what}")
