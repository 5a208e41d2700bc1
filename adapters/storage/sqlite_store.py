"""The embedded default event store: `events.sqlite3` in the session dir (S4.4)."""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING
from urllib.parse import quote

from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool, SQLiteFactory

from spillvault.adapters.storage.eventstore import SessionStore
from spillvault.adapters.storage.fs import (
    READ_FLAGS,
    check_private,
    create_private_file,
)
from spillvault.domain.errors import ArtifactAccessError, ArtifactLeaseJournalError

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


def _replace_pool(
    factory: SQLiteFactory, pool_type: type[SQLiteConnectionPool]
) -> None:
    """Give `factory` a pool of `pool_type` in place of the stock one (unopened)."""
    stock = factory.datastore.pool
    factory.datastore.pool = pool_type(
        db_name=stock.db_name, lock_timeout=stock.lock_timeout
    )
    stock.close()


class FullSyncSQLiteFactory(SQLiteFactory):
    """eventsourcing's SQLite module with durable commits whatever the build default."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        _replace_pool(self, FullSyncConnectionPool)


class ReadOnlyConnectionPool(SQLiteConnectionPool):
    """Connections that never write: no switch to WAL, no durability pragma."""

    def __init__(self, *, db_name: str, lock_timeout: int | None) -> None:
        super().__init__(db_name=db_name, lock_timeout=lock_timeout)
        # The store was created in WAL mode; asking to switch would be a write.
        self.is_journal_mode_wal = True


class ReadOnlySQLiteFactory(SQLiteFactory):
    """eventsourcing's SQLite module over read-only connections."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        _replace_pool(self, ReadOnlyConnectionPool)


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
        self._check_file()
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

    def open_read_only(self) -> SessionStore:
        """Open the existing file for reading only (a read-only session view).

        A WAL database read with `mode=ro` needs its `-shm` index: SQLite
        creates it (and an empty `-wal`) where it can, and cannot open the
        store at all where it cannot and they are absent (a read-only mount
        after a clean close). `immutable=1` reads without them or any lock,
        but ignores the WAL, so it is used only where nothing of ours can
        write (read-only mount or unwritable directory) and no `-wal` holds
        frames; a snapshot of a live or crashed writer keeps its `-wal` and
        `-shm`, and `mode=ro` reads the transactions only they hold.
        """
        self._check_file()
        immutable = "&immutable=1" if self._immutable() else ""
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": f"file:{quote(self._path)}?mode=ro{immutable}",
            "SQLITE_LOCK_TIMEOUT": str(LOCK_TIMEOUT_SECONDS),
            "CREATE_TABLE": "no",
        }
        return SessionStore(env, factory=ReadOnlySQLiteFactory)

    def _check_file(self) -> None:
        fd = self._fs.open(STORE_NAME, READ_FLAGS, dir_fd=self._dir_fd)
        try:
            check_private(self._fs, fd, STORE_NAME, directory=False)
        finally:
            self._fs.close(fd)

    def _immutable(self) -> bool:
        """Say whether the store can be read as an immutable file (see above)."""
        try:
            wal = self._fs.lstat(f"{STORE_NAME}-wal", dir_fd=self._dir_fd)
        except FileNotFoundError:
            pass
        else:
            if wal.st_size > 0:
                return False
        read_only_mount = bool(os.fstatvfs(self._dir_fd).f_flag & os.ST_RDONLY)
        return read_only_mount or not os.access(self._session_path, os.W_OK)

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
