"""The SQLite owner: references in one database file, fenced by BEGIN IMMEDIATE (S5.6).

A fence is a write transaction held for the whole `with` block (or until a seal
commits the final tombstone): SQLite admits one writer per database, so a
publish from any thread or process waits for it (up to the busy timeout). The
seal is a CAS on the row version (generation).
Every call opens its own connection, which is correct across threads and
processes alike.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING
from urllib.parse import quote

from spillvault.adapters.owners.owner_common import (
    RECORD_TABLE,
    ArtifactOwnerError,
    FencedOwner,
    RecordStatements,
    SQLRecordSlot,
    wrapped_errors,
)
from spillvault.adapters.storage.fs import EXCLUSIVE_CREATE, PRIVATE_FILE_MODE

if TYPE_CHECKING:
    from collections.abc import Iterator

DEFAULT_LOCK_TIMEOUT_SECONDS = 30.0
_WHAT = "SQLite owner"
_CREATE_TABLE = f"""
CREATE TABLE IF NOT EXISTS {RECORD_TABLE} (
    transaction_id TEXT PRIMARY KEY NOT NULL,
    generation INTEGER NOT NULL CHECK (generation >= 0),
    state TEXT NOT NULL CHECK (state IN ('published', 'absent', 'tombstoned')),
    source_id TEXT,
    content_sha256 TEXT,
    memory_reference TEXT,
    CHECK ((state = 'published') = (memory_reference IS NOT NULL))
)
"""


class SQLiteOwner(FencedOwner):
    """A memory owner in a SQLite file (created 0600 when missing)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
        create: bool = True,
    ) -> None:
        """Open the owner at `path`; `create=False` refuses a missing one.

        Operators' tools pass `create=False`: an empty owner answers ABSENT for
        everything, and reconciling against it would abort every pending lease.
        """
        self.path = os.fspath(path)
        self.lock_timeout = lock_timeout
        self._statements = RecordStatements.for_table(RECORD_TABLE, "?")
        if create:
            _create_private_file(self.path)
        elif not os.path.isfile(self.path):
            msg = f"no SQLite owner database at {self.path}"
            raise ArtifactOwnerError(msg)
        connection = self._connect()
        try:
            with wrapped_errors(sqlite3.Error, f"{_WHAT} setup"):
                if (
                    not create
                    and not connection.execute(
                        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (RECORD_TABLE,),
                    ).fetchone()
                ):
                    msg = f"{self.path} holds no owner table {RECORD_TABLE!r}"
                    raise ArtifactOwnerError(msg)
                # WAL keeps readers of other tools unblocked; FULL sync (set per
                # connection) makes a tombstone survive a power cut (S5.3).
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(_CREATE_TABLE)
        finally:
            connection.close()

    @contextmanager
    def _locked_record(self, transaction_id: str) -> Iterator[SQLRecordSlot]:
        connection = self._connect()
        try:
            with wrapped_errors(sqlite3.Error, f"{_WHAT} lock"):
                connection.execute("BEGIN IMMEDIATE")
            yield SQLRecordSlot(
                connection,
                transaction_id,
                self._statements,
                errors=sqlite3.Error,
                what=_WHAT,
                commit=partial(connection.execute, "COMMIT"),
            )
            with wrapped_errors(sqlite3.Error, f"{_WHAT} commit"):
                if connection.in_transaction:  # a seal may have committed already
                    connection.execute("COMMIT")
        finally:
            connection.close()  # rolls back whatever was not committed

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: a vanished file must fail loudly, never come back empty and
        # forget its tombstones.
        uri = f"file:{quote(self.path)}?mode=rw"
        with wrapped_errors(sqlite3.Error, f"{_WHAT} open"):
            connection = sqlite3.connect(
                uri, uri=True, timeout=self.lock_timeout, isolation_level=None
            )
            try:
                connection.execute("PRAGMA synchronous=FULL")
            except BaseException:
                connection.close()
                raise
        return connection


def _create_private_file(path: str) -> None:
    try:
        fd = os.open(path, EXCLUSIVE_CREATE, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # whatever the umask
        os.fsync(fd)
    finally:
        os.close(fd)
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
