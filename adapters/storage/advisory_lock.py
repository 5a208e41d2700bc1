"""The session lock across hosts: a PostgreSQL advisory lock (S4.4).

`SessionLock` flocks `<session>/.lock`, which excludes the processes of one
host only. A session journalled on a PostgreSQL server can be opened from
several hosts, so its lock is an advisory lock on that server, keyed by the
store id; inside the process a re-entrant mutex and a depth counter work as in
`SessionLock`, and only the outermost acquire and release reach the server.

The lock is session-level (`pg_advisory_lock`), not transaction-level:
eventsourcing writes through connections of its own pool, in transactions the
lock cannot share, and the lock must span several of them (a publication, a
whole GC). So each lock object keeps a dedicated connection of its own.

The server drops a session's advisory locks when its connection ends, so a
connection lost while held loses the lock without a word. Keepalives (and a TCP
user timeout) bound how long a dead peer goes unnoticed, and the outermost
release reports a lock that may have been lost.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from typing import TYPE_CHECKING, Self
from uuid import UUID

from spillvault.adapters.storage.postgres_store import (
    connect,
    describe_server,
    parse_dsn,
)
from spillvault.domain.errors import ArtifactLeaseJournalError

if TYPE_CHECKING:
    from types import TracebackType

    from psycopg import Connection
    from psycopg.rows import TupleRow

_KEY_DOMAIN = b"spillvault-session-lock\0"
# Keepalives probe an idle or waiting connection; a query in flight to a host
# that vanished waits on TCP retransmission instead, which only this bounds (ms).
_TCP_USER_TIMEOUT_MS = 25_000


def lock_key(store_id: str) -> int:
    """Return the advisory-lock key of a store id: stable, signed 64-bit."""
    digest = hashlib.sha256(_KEY_DOMAIN + UUID(store_id).bytes).digest()
    # Signed: pg_advisory_lock takes a bigint, which an unsigned value at or
    # above 2**63 would overflow.
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryLock:
    """Re-entrant across one thread; exclusive across threads, processes and hosts."""

    def __init__(
        self,
        dsn: str,
        store_id: str,
        *,
        wait_seconds: float = 30.0,
        connect_timeout: int = 10,
    ) -> None:
        if wait_seconds <= 0:
            msg = "wait_seconds must be positive: a lock_timeout of 0 waits forever"
            raise ValueError(msg)
        self._settings = parse_dsn(dsn)
        self._server = describe_server(self._settings)
        self._store_id = str(UUID(store_id))
        self._key = lock_key(store_id)
        self._wait_seconds = wait_seconds
        self._connect_timeout = connect_timeout
        self._mutex = threading.RLock()
        self._depth = 0
        # The open connection, if any, where the finalizer can reach it without self.
        self._slot: list[Connection[TupleRow]] = []
        self._finalizer = weakref.finalize(self, _close_slot, self._slot)

    def acquire(self) -> None:
        """Take the lock; the outermost acquire takes the server's advisory lock."""
        self._mutex.acquire()
        if self._depth == 0:
            try:
                self._lock_on_server()
            except BaseException:
                self._mutex.release()
                raise
        self._depth += 1

    def release(self) -> None:
        """Drop one level; the outermost release unlocks on the server."""
        if not self.held:
            msg = "advisory lock released by a thread that does not hold it"
            raise RuntimeError(msg)
        self._depth -= 1
        try:
            if self._depth == 0:
                self._unlock_on_server()
        finally:
            self._mutex.release()

    @property
    def held(self) -> bool:
        """Say whether the calling thread holds the lock."""
        if not self._mutex.acquire(blocking=False):
            return False
        try:
            return self._depth > 0
        finally:
            self._mutex.release()

    def close(self) -> None:
        """Close the dedicated connection (idempotent; the next acquire reopens)."""
        with self._mutex:
            if self._depth:
                msg = "closing an advisory lock this thread holds"
                raise RuntimeError(msg)
            _close_slot(self._slot)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _lock_on_server(self) -> None:
        from psycopg import Error, errors  # noqa: PLC0415 - optional extra

        # A connection idle since its last use may have died meanwhile (a server
        # restart) while holding nothing: it earns one retry on a fresh one.
        for last_try in (False, True) if self._slot else (True,):
            try:
                self._connection().execute("SELECT pg_advisory_lock(%s)", (self._key,))
            except errors.LockNotAvailable as error:
                msg = (
                    f"session {self._store_id} is locked by another process or "
                    f"host: waited {self._wait_seconds:g} s for its advisory lock "
                    f"on {self._server}"
                )
                raise ArtifactLeaseJournalError(msg) from error
            except BaseException as error:
                # Granted or not is unknown; closing the connection drops it either way.
                _close_slot(self._slot)
                if not isinstance(error, Error):
                    raise
                if last_try:
                    raise self._unavailable(error) from error
            else:
                return

    def _unlock_on_server(self) -> None:
        from psycopg import Error  # noqa: PLC0415 - optional extra

        lost = (
            f"the advisory lock of session {self._store_id} on {self._server} may "
            "have been lost while held (the server drops a dead connection's locks)"
        )
        try:
            cursor = self._slot[0].execute(
                "SELECT pg_advisory_unlock(%s)", (self._key,)
            )
            unlocked = cursor.fetchone() == (True,)
        except BaseException as error:
            _close_slot(self._slot)
            if isinstance(error, Error):
                raise ArtifactLeaseJournalError(f"{lost}: {error}") from error
            raise
        if not unlocked:
            raise ArtifactLeaseJournalError(f"{lost}: the server did not hold it")

    def _connection(self) -> Connection[TupleRow]:
        if self._slot:
            return self._slot[0]
        import psycopg  # noqa: PLC0415 - optional extra
        from psycopg import sql  # noqa: PLC0415 - optional extra

        # At least 1 ms: a lock_timeout of 0 would wait forever.
        timeout_ms = max(1, round(self._wait_seconds * 1000))
        try:
            connection = connect(
                self._settings,
                connect_timeout=self._connect_timeout,
                application_name="spillvault session lock",
                tcp_user_timeout=_TCP_USER_TIMEOUT_MS,
                autocommit=True,
                # A server silent for 10 + 3 x 5 s is dead to us.
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
        except psycopg.Error as error:
            raise self._unavailable(error) from error
        self._slot.append(connection)
        # The server probes us alike: a host that vanished holding the lock
        # frees it after about 25 s, not after the OS default of hours.
        connection.execute(
            sql.SQL(
                "SET lock_timeout = {}; SET tcp_keepalives_idle = 10;"
                " SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 3"
            ).format(sql.Literal(timeout_ms))
        )
        return connection

    def _unavailable(self, error: Exception) -> ArtifactLeaseJournalError:
        msg = f"PostgreSQL session lock unavailable ({self._server}): {error}"
        return ArtifactLeaseJournalError(msg)


def _close_slot(slot: list[Connection[TupleRow]]) -> None:
    while slot:
        slot.pop().close()


_registry: weakref.WeakValueDictionary[tuple[str, ...], AdvisoryLock] = (
    weakref.WeakValueDictionary()
)
_registry_mutex = threading.Lock()


def advisory_lock_for(dsn: str, store_id: str) -> AdvisoryLock:
    """Return this process's lock for session `store_id` on the server `dsn` names."""
    s = parse_dsn(dsn)
    # Advisory locks are per database, whoever connects: two objects on one
    # key in one process would wait on each other, so the user and password
    # (and the spelling of the store id) do not part them.
    key = (
        s["POSTGRES_HOST"],
        s["POSTGRES_PORT"],
        s["POSTGRES_DBNAME"],
        str(UUID(store_id)),
    )
    with _registry_mutex:
        lock = _registry.get(key)
        if lock is None:
            lock = AdvisoryLock(dsn, store_id)
            _registry[key] = lock
        return lock
