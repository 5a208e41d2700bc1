"""The retention journal as a PostgreSQL table, for sessions with no directory.

A session whose artifacts live in an object store has no local directory, so
its journal lives beside eventsourcing's tables in the session's own schema.
`JournalTable` keeps `JournalFile`'s contract (J3-J7) by keeping its byte
offsets: one row per line, keyed by the offset where the line starts in the
file it stands for, so the journal is still the byte stream of its lines in
key order. Checkpoints (offset, sequence, hash), `expect_end`, catch-up reads
from an offset and `journal verify` then work unchanged on either.

A table has no torn tails (a transaction commits all its lines or none), so
`last_complete()` never reports one and nothing is ever cut aside (J6).
Writers serialise on a transaction-scoped advisory lock, which also guards the
creation of the tables; readers read one snapshot, so they see a journal
before or after an append or a repair, never a mix.

A database error once a write transaction holds the lock poisons the
`JournalTable` (J4), as a write or fsync error poisons a `JournalFile`: a
failed commit may or may not have landed, so this process appends nothing
more. A connection that fails before the lock is taken has written nothing and
is simply reopened. The poison lives on the instance: keep one per session.
"""

from __future__ import annotations

import re
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Self, TypeVar

from spillvault.adapters.storage.journal_file import JournalTail
from spillvault.adapters.storage.postgres_store import (
    connect,
    describe_server,
    parse_dsn,
    synchronous_options,
)
from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.journal_records import (
    JournalLine,
    JournalRecord,
    decode_line_at,
    encode,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import TracebackType

    import psycopg
    from psycopg.rows import TupleRow

    Connection = psycopg.Connection[TupleRow]

JOURNAL_TABLE = "spillvault_journal"
"""The journal's table; `<table>_kept` and `<table>_aside` hold repaired journals."""
PAGE_ROWS = 1024
"""Lines fetched per query when reading forwards (records are small)."""
COPY_ROWS = 4096
"""Lines written per COPY, so each statement stays well inside the timeout."""
MOVE_SPAN = 1 << 26
"""Journal bytes moved aside per statement by a repair."""
APPLICATION_NAME = "spillvault-journal"
"""How the journal's connections show in `pg_stat_activity`."""
_LOCK_CLASS = 0x5356_4A4C  # "SVJL": keeps our advisory locks apart from others'
_SUFFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_T = TypeVar("_T")


class _Statements:
    """The SQL of one journal, its identifiers quoted once."""

    def __init__(self, schema: str, table: str) -> None:
        from psycopg import sql  # noqa: PLC0415 - optional extra

        ids = {
            "journal": sql.Identifier(schema, table),
            "kept": sql.Identifier(schema, f"{table}_kept"),
            "aside": sql.Identifier(schema, f"{table}_aside"),
        }

        def q(text: str) -> sql.Composed:
            return sql.SQL(text).format(**ids)

        # Each row is exactly one line: its only newline is its last byte.
        self.create = [
            q(
                "CREATE TABLE IF NOT EXISTS {journal} ("
                " start bigint PRIMARY KEY CHECK (start >= 0),"
                " line bytea NOT NULL CHECK (octet_length(line) > 0"
                " AND position(decode('0a', 'hex') IN line) = octet_length(line)))"
            ),
            q(
                "CREATE TABLE IF NOT EXISTS {kept} ("
                " suffix text PRIMARY KEY,"
                " size bigint NOT NULL,"
                " kept_at timestamptz NOT NULL DEFAULT now())"
            ),
            q(
                "CREATE TABLE IF NOT EXISTS {aside} ("
                " suffix text NOT NULL REFERENCES {kept},"
                " start bigint NOT NULL,"
                " line bytea NOT NULL,"
                " PRIMARY KEY (suffix, start))"
            ),
        ]
        self.lock = sql.SQL("SELECT pg_advisory_xact_lock(%s, hashtext(%s))")
        self.found = sql.SQL(
            "SELECT n.oid IS NOT NULL, EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
            " WHERE c.relnamespace = n.oid AND c.relname = %s)"
            " FROM (SELECT 1) AS one"
            " LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = %s"
        )
        self.last = q("SELECT start, line FROM {journal} ORDER BY start DESC LIMIT %s")
        self.end = q(
            "SELECT start + octet_length(line) FROM {journal}"
            " ORDER BY start DESC LIMIT 1"
        )
        self.starts_at = q("SELECT 1 FROM {journal} WHERE start = %s")
        self.containing = q("SELECT max(start) FROM {journal} WHERE start <= %s")
        self.page = q(
            "SELECT start, line FROM {journal} WHERE start >= %s AND start < %s"
            " ORDER BY start LIMIT %s"
        )
        self.copy = q("COPY {journal} (start, line) FROM STDIN")
        self.kept_suffix = q("SELECT 1 FROM {kept} WHERE suffix = %s")
        self.keep = q("INSERT INTO {kept} (suffix, size) VALUES (%s, %s)")
        self.move_aside = q(
            "INSERT INTO {aside} (suffix, start, line)"
            " SELECT %s, start, line FROM {journal} WHERE start >= %s AND start < %s"
        )
        self.delete = q("DELETE FROM {journal} WHERE start >= %s AND start < %s")


class JournalTable:
    """One session's retention journal, as rows in its PostgreSQL schema."""

    def __init__(
        self,
        dsn: str,
        schema: str,
        *,
        table: str = JOURNAL_TABLE,
        statement_timeout: float = 30.0,
    ) -> None:
        if statement_timeout <= 0:
            msg = "statement_timeout must be > 0"
            raise ValueError(msg)
        self._settings = parse_dsn(dsn)
        self._schema = schema
        self._table = table
        self._sql = _Statements(schema, table)
        timeout_ms = max(1, round(statement_timeout * 1000))
        # Idle transactions are bounded too, so a stalled writer frees the lock.
        self._options = (
            f"{synchronous_options()} -c statement_timeout={timeout_ms}"
            f" -c idle_in_transaction_session_timeout={timeout_ms}"
        )
        self._connection: Connection | None = None
        self._lock = threading.Lock()  # one connection, one transaction at a time
        self._poison: str | None = None

    @property
    def name(self) -> str:
        """The journal's qualified table name, `<schema>.<table>`."""
        return f"{self._schema}.{self._table}"

    @property
    def poisoned(self) -> bool:
        """Whether a write error has stopped this writer for good (J4)."""
        return self._poison is not None

    def torn_copy_name(self, offset: int, attempt: int = 1) -> str:
        """Return the name a torn tail at `offset` would get (a table has none)."""
        name = f"{self.name}.torn-{offset}"
        return name if attempt == 1 else f"{name}.{attempt}"

    def describe(self) -> str:
        """Name the server, database and schema for messages, without the password."""
        return f"{describe_server(self._settings)} schema {self._schema}"

    def exists(self) -> bool:
        """Say whether the journal's table exists (even empty)."""
        return self._read(lambda c: self._found(c)[1], missing=False)

    def close(self) -> None:
        """Close the connection (idempotent; a later call opens a new one)."""
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # reading ----------------------------------------------------------------

    def read_from(self, offset: int, *, limit: int | None = None) -> bytes:
        """Return the bytes from `offset` on (at most `limit`); b"" if it is missing."""
        if offset < 0:
            msg = "offset must be >= 0"
            raise ValueError(msg)
        if limit is not None and limit < 0:
            msg = "limit must be >= 0"
            raise ValueError(msg)
        stop = None if limit is None else offset + limit
        return self._read(lambda c: self._bytes(c, offset, stop), missing=b"")

    def last_complete(self) -> JournalTail:
        """Decode the last line; a table has no torn tail, so `size == complete_end`."""
        last = self._read(self._last_line, missing=None)
        if last is None:
            return JournalTail(0, 0, None, None)
        start, line = last
        record = decode_line_at(line[:-1], offset=start)
        end = start + len(line)
        return JournalTail(end, end, start, record)

    def _bytes(self, connection: Connection, offset: int, stop: int | None) -> bytes:
        """Return bytes `offset:stop` of the journal, a page of lines at a time."""
        row = connection.execute(self._sql.containing, (offset,)).fetchone()
        expected = 0 if row is None or row[0] is None else int(row[0])
        low = expected  # the next page starts at the first key >= low
        upper = _BIGINT_MAX if stop is None else stop
        chunks: list[bytes] = []
        while low < upper:
            rows = connection.execute(
                self._sql.page, (low, upper, PAGE_ROWS)
            ).fetchall()
            for raw_start, raw_line in rows:
                start, line = int(raw_start), bytes(raw_line)
                self._check_contiguous(expected, start)
                begin = max(0, offset - start)
                end = len(line) if stop is None else min(len(line), stop - start)
                if begin < end:
                    chunks.append(line[begin:end])
                expected = start + len(line)
            if len(rows) < PAGE_ROWS:
                break
            # Keys past the last one, not past its end: an overlap must show.
            low = int(rows[-1][0]) + 1
        return b"".join(chunks)

    def _last_line(self, connection: Connection) -> tuple[int, bytes] | None:
        rows = connection.execute(self._sql.last, (2,)).fetchall()
        if not rows:
            return None
        start, line = int(rows[0][0]), bytes(rows[0][1])
        if len(rows) == 1:
            self._check_contiguous(0, start)
        else:
            self._check_contiguous(int(rows[1][0]) + len(bytes(rows[1][1])), start)
        return start, line

    def _check_contiguous(self, expected: int, start: int) -> None:
        if start != expected:
            msg = (
                f"{self.name} is damaged: a line starts at offset {start}, "
                f"where offset {expected} was expected"
            )
            raise ArtifactLeaseJournalError(msg)

    def _found(self, connection: Connection) -> tuple[bool, bool]:
        """Say whether the schema, and the journal's table in it, exist."""
        row = connection.execute(self._sql.found, (self._table, self._schema))
        schema, table = row.fetchone() or (False, False)
        return bool(schema), bool(table)

    def _read(self, work: Callable[[Connection], _T], *, missing: _T) -> _T:
        """Run `work` in one read-only snapshot; `missing` if there is no table."""
        import psycopg  # noqa: PLC0415 - optional extra

        with self._lock:
            for attempt in (1, 2):
                connection = self._connect()
                try:
                    with self._transaction(connection, reading=True):
                        return work(connection)
                except (
                    psycopg.errors.UndefinedTable,
                    psycopg.errors.InvalidSchemaName,
                ):
                    return missing
                except psycopg.Error as error:
                    if attempt == 1 and connection.broken:
                        continue  # a read is safe to retry on a fresh connection
                    raise self._error("cannot read", error) from error
        raise AssertionError  # pragma: no cover - the loop returns or raises

    # appending (J3, J4) ------------------------------------------------------

    def append(self, records: Sequence[JournalRecord], *, expect_end: int) -> int:
        """Append whole lines after `expect_end`, commit, and return the new end.

        `expect_end` is where the caller verified the last line ends. A journal
        that is shorter or longer (another writer) raises without writing:
        re-read it. A missing table is created only when `expect_end` is 0.
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
        self._write(lambda c: self._append(c, lines, expect_end))
        return expect_end + sum(len(line) for line in lines)

    def _append(self, connection: Connection, lines: Sequence[bytes], end: int) -> None:
        schema, table = self._found(connection)
        if not table:
            self._check_schema(schema=schema)
            if end:
                msg = f"{self.name} is missing; expected {end} bytes: re-read it"
                raise ArtifactLeaseJournalError(msg)
            self._create(connection)
        self._settle(connection, end)
        self._insert(connection, end, lines)

    def _settle(self, connection: Connection, expect_end: int) -> None:
        """Check that the journal ends exactly at `expect_end`, or raise."""
        row = connection.execute(self._sql.end).fetchone()
        size = 0 if row is None else int(row[0])
        if size < expect_end:
            msg = (
                f"{self.name} is shorter ({size} bytes) than its verified part "
                f"({expect_end} bytes): re-read it"
            )
            raise ArtifactLeaseJournalError(msg)
        if size == expect_end:
            return
        if (
            expect_end
            and not connection.execute(self._sql.starts_at, (expect_end,)).fetchone()
        ):
            msg = f"offset {expect_end} is not the end of a line in {self.name}"
            raise ArtifactLeaseJournalError(msg)
        msg = (
            f"{self.name} has complete lines after offset {expect_end} "
            "(another writer appended): re-read it"
        )
        raise ArtifactLeaseJournalError(msg)

    def _insert(
        self, connection: Connection, start: int, lines: Sequence[bytes]
    ) -> None:
        for first in range(0, len(lines), COPY_ROWS):
            with (
                connection.cursor() as cursor,
                cursor.copy(self._sql.copy) as copy,
            ):
                for line in lines[first : first + COPY_ROWS]:
                    copy.write_row((start, line))
                    start += len(line)

    # repair (J7) -------------------------------------------------------------

    def replace_with(
        self, records: Sequence[JournalRecord], *, keep_aside_suffix: str
    ) -> int:
        """Replace the journal by `records`, keeping the old lines aside; return size.

        In one transaction the current lines (if the table exists) are copied
        to `<table>_aside` under `keep_aside_suffix` (which must not have been
        used), deleted, and the new lines written. Readers see the old or the
        new journal, never a mix.
        """
        self._check_healthy()
        if not _SUFFIX.fullmatch(keep_aside_suffix):
            msg = (
                "keep_aside_suffix must be 1-128 letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit, not {keep_aside_suffix!r}"
            )
            raise ValueError(msg)
        lines = [encode(record) for record in records]
        self._write(lambda c: self._swap_in(c, lines, keep_aside_suffix))
        return sum(len(line) for line in lines)

    def _swap_in(
        self, connection: Connection, lines: Sequence[bytes], suffix: str
    ) -> None:
        schema, table = self._found(connection)
        self._check_schema(schema=schema)
        self._create(connection)  # the aside tables too, if only they are missing
        if table:
            if connection.execute(self._sql.kept_suffix, (suffix,)).fetchone():
                msg = f"{self.name}.{suffix} already exists: choose another suffix"
                raise ArtifactLeaseJournalError(msg)
            row = connection.execute(self._sql.end).fetchone()
            size = 0 if row is None else int(row[0])
            connection.execute(self._sql.keep, (suffix, size))
            for low, high in _spans(size):
                connection.execute(self._sql.move_aside, (suffix, low, high))
            for low, high in _spans(size):
                connection.execute(self._sql.delete, (low, high))
        self._insert(connection, 0, lines)

    # shared write idioms -----------------------------------------------------

    def _write(self, work: Callable[[Connection], None]) -> None:
        """Run `work` in one transaction holding the writers' lock; poison on error."""
        import psycopg  # noqa: PLC0415 - optional extra

        with self._lock:
            self._check_healthy()
            for attempt in (1, 2):
                connection = self._connect()
                locked = False
                try:
                    with self._transaction(connection, reading=False):
                        connection.execute(self._sql.lock, (_LOCK_CLASS, self.name))
                        locked = True
                        work(connection)
                except psycopg.Error as error:
                    if locked:
                        raise self._poisoned_by(error) from error
                    if attempt == 1 and connection.broken:
                        continue  # died while idle: nothing was sent, reopen it
                    raise self._error("cannot lock", error) from error
                return
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def _create(self, connection: Connection) -> None:
        for statement in self._sql.create:
            connection.execute(statement)

    def _check_schema(self, *, schema: bool) -> None:
        if not schema:
            msg = f"schema {self._schema} does not exist ({self.describe()})"
            raise ArtifactLeaseJournalError(msg)

    def _check_healthy(self) -> None:
        if self._poison is not None:
            msg = f"journal writer poisoned: {self._poison}"
            raise ArtifactLeaseJournalError(msg)

    def _poisoned_by(self, error: Exception) -> ArtifactLeaseJournalError:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        self._poison = f"{reason or type(error).__name__} ({self.describe()})"
        return ArtifactLeaseJournalError(f"journal writer poisoned: {self._poison}")

    def _error(self, doing: str, error: Exception) -> ArtifactLeaseJournalError:
        msg = f"{doing} {self.name} ({self.describe()}): {error}"
        return ArtifactLeaseJournalError(msg)

    # connection --------------------------------------------------------------

    def _connect(self) -> Connection:
        """Return the open connection, opening a new one if it is missing or broken."""
        import psycopg  # noqa: PLC0415 - optional extra

        connection = self._connection
        if connection is not None and not connection.closed:
            if not connection.broken:
                return connection
            connection.close()
        self._connection = None
        try:
            connection = connect(
                self._settings,
                options=self._options,
                application_name=APPLICATION_NAME,
                autocommit=True,
            )
        except psycopg.Error as error:
            msg = f"PostgreSQL journal unavailable ({self.describe()}): {error}"
            raise ArtifactLeaseJournalError(msg) from error
        self._connection = connection
        return connection

    @contextmanager
    def _transaction(self, connection: Connection, *, reading: bool) -> Iterator[None]:
        """Open a transaction: a read-only snapshot, or read committed for writes."""
        from psycopg import IsolationLevel  # noqa: PLC0415 - optional extra

        # Explicit, whatever the server's default: a writer must see the last
        # commit once it holds the lock, a reader one state throughout.
        connection.isolation_level = (
            IsolationLevel.REPEATABLE_READ if reading else IsolationLevel.READ_COMMITTED
        )
        connection.read_only = reading
        with connection.transaction():
            yield


_BIGINT_MAX = (1 << 63) - 1


def _spans(size: int) -> Iterator[tuple[int, int]]:
    """Split the keys of a `size`-byte journal into bounded ranges, the last open."""
    low = 0
    while low + MOVE_SPAN < size:
        yield low, low + MOVE_SPAN
        low += MOVE_SPAN
    yield low, _BIGINT_MAX


__all__ = ["JOURNAL_TABLE", "JournalTable"]
