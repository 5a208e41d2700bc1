"""The PostgreSQL owner: references in a schema of their own, row-locked (S5.6).

A fence is a transaction holding `SELECT ... FOR UPDATE` on the id's row, which
an upsert (`INSERT ... ON CONFLICT DO NOTHING`) creates first: a plain
`SELECT ... FOR UPDATE` locks nothing when the row is absent. Publish and remove
take the same row lock, so they wait for a fence held by any connection. The
seal is a CAS on the row version (generation). Every call opens its own
connection, which asks for `synchronous_commit=on`: an acknowledged publish,
removal or seal is on disk whatever the server's tuning. psycopg (the
`postgres` extra) is imported on first use.
"""

from __future__ import annotations

import random
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from spillvault.adapters.owners.owner_common import (
    RECORD_TABLE,
    ArtifactOwnerError,
    FencedOwner,
    RecordStatements,
    SQLRecordSlot,
    wrapped_errors,
)
from spillvault.adapters.storage.postgres_store import synchronous_options

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import psycopg

T = TypeVar("T")

DEFAULT_SCHEMA = "spillvault_owner"
DEFAULT_LOCK_TIMEOUT_SECONDS = 30.0
CONNECT_TIMEOUT_SECONDS = 10
ATTEMPTS = 5
_FIRST_PAUSE = 0.01
_WHAT = "PostgreSQL owner"


class PostgresOwner(FencedOwner):
    """A memory owner in a PostgreSQL schema (created, with its table, if missing)."""

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
        create: bool = True,
    ) -> None:
        """Open the owner in `schema`; `create=False` refuses a missing table.

        Operators' tools pass `create=False`: an empty owner answers ABSENT for
        everything, and reconciling against it would abort every pending lease.
        """
        try:
            from psycopg import sql  # noqa: PLC0415 - optional extra
        except ImportError as error:
            msg = "PostgresOwner needs the extra: pip install 'spillvault[postgres]'"
            raise ArtifactOwnerError(msg) from error
        self._dsn = dsn
        self.schema = schema
        self.lock_timeout = lock_timeout
        table = (
            sql.SQL("{}.{}")
            .format(sql.Identifier(schema), sql.Identifier(RECORD_TABLE))
            .as_string()
        )
        self._table = table
        self._statements = RecordStatements.for_table(table, "%s")
        if create:
            self._create_tables()
        else:
            self._check_table()

    @contextmanager
    def _locked_record(self, transaction_id: str) -> Iterator[SQLRecordSlot]:
        from psycopg import Error  # noqa: PLC0415 - optional extra

        connection = self._connect()
        try:
            with wrapped_errors(Error, f"{_WHAT} lock"):
                self._lock_row(connection, transaction_id)
            yield SQLRecordSlot(
                connection,
                transaction_id,
                self._statements,
                errors=Error,
                what=_WHAT,
                commit=connection.commit,
            )
            with wrapped_errors(Error, f"{_WHAT} commit"):
                connection.commit()
        finally:
            connection.close()  # the server rolls back whatever was not committed

    def _retrying(self, operation: Callable[[], T]) -> T:
        # Serialization failures and deadlocks are transient: the transaction
        # was rolled back whole, so running the operation again is safe.
        from psycopg import errors  # noqa: PLC0415 - optional extra

        transient = (errors.SerializationFailure, errors.DeadlockDetected)
        pause = _FIRST_PAUSE
        for _ in range(ATTEMPTS - 1):
            try:
                return operation()
            except ArtifactOwnerError as error:
                if not isinstance(error.__cause__, transient):
                    raise
            time.sleep(random.uniform(0, pause))  # noqa: S311 - jitter, not secrecy
            pause *= 2
        return operation()

    def _lock_row(
        self, connection: psycopg.Connection[Any], transaction_id: str
    ) -> None:
        connection.execute(
            f"INSERT INTO {self._table} (transaction_id, generation, state) "  # noqa: S608 - quoted name
            "VALUES (%s, 0, 'absent') ON CONFLICT (transaction_id) DO NOTHING",
            (transaction_id,),
        )
        connection.execute(
            f"SELECT 1 FROM {self._table} WHERE transaction_id = %s FOR UPDATE",  # noqa: S608 - quoted name
            (transaction_id,),
        )

    def _connect(self) -> psycopg.Connection[Any]:
        import psycopg  # noqa: PLC0415 - optional extra
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415 - optional extra

        with wrapped_errors(psycopg.Error, f"{_WHAT} connect"):
            # The DSN's own options are kept: psycopg's keyword replaces them.
            given = conninfo_to_dict(self._dsn).get("options")
            connection = psycopg.connect(
                self._dsn,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                options=synchronous_options(None if given is None else str(given)),
            )
            try:
                # Row locks give the exclusion; stricter levels would only add
                # serialization failures.
                connection.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
                milliseconds = str(max(1, round(self.lock_timeout * 1000)))
                connection.execute(
                    "SELECT set_config('lock_timeout', %s, false)", (milliseconds,)
                )
            except BaseException:
                connection.close()
                raise
        return connection

    def _check_table(self) -> None:
        from psycopg import Error  # noqa: PLC0415 - optional extra

        connection = self._connect()
        try:
            with wrapped_errors(Error, f"{_WHAT} setup"):
                row = connection.execute(
                    "SELECT to_regclass(%s)", (self._table,)
                ).fetchone()
        finally:
            connection.close()
        if row is None or row[0] is None:
            msg = f"no owner table {self._table} on this server"
            raise ArtifactOwnerError(msg)

    def _create_tables(self) -> None:
        from psycopg import Error, sql  # noqa: PLC0415 - optional extra

        connection = self._connect()
        try:
            with wrapped_errors(Error, f"{_WHAT} setup"):
                # Concurrent CREATE ... IF NOT EXISTS can still collide in the
                # catalogs; an advisory lock on the schema name serialises them.
                connection.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"spillvault owner schema {self.schema}",),
                )
                connection.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                        sql.Identifier(self.schema)
                    )
                )
                connection.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._table} ("
                    "transaction_id text PRIMARY KEY, "
                    "generation bigint NOT NULL CHECK (generation >= 0), "
                    "state text NOT NULL "
                    "CHECK (state IN ('published', 'absent', 'tombstoned')), "
                    "source_id text, content_sha256 text, memory_reference jsonb, "
                    "CHECK ((state = 'published') = (memory_reference IS NOT NULL)))"
                )
                connection.commit()
        finally:
            connection.close()
