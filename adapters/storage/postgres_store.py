"""The server-backed event store: PostgreSQL, one schema per session (S4.4).

Every connection spillvault opens (here and in the PostgreSQL owner) asks for
`synchronous_commit=on` when it connects: a server, database or role tuned
with `off` acknowledges a commit before its WAL is written, and a server crash
then loses an event the journal already holds.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from spillvault.adapters.storage.eventstore import SessionStore
from spillvault.domain.errors import ArtifactLeaseJournalError

if TYPE_CHECKING:
    from collections.abc import Mapping
    from uuid import UUID

    from eventsourcing.persistence import InfrastructureFactory
    from eventsourcing.utils import Environment
    from psycopg import Connection
    from psycopg.rows import TupleRow

DSN_SCHEMES = ("postgresql://", "postgres://")
SCHEMA_PREFIX = "spillvault_"
SYNCHRONOUS_COMMIT = "-c synchronous_commit=on"
_SUPPORTED_DSN_KEYS = frozenset({"host", "port", "user", "password", "dbname"})


_DURABLE_LEVELS = frozenset({"local", "remote_write", "on", "remote_apply"})
_SYNCHRONOUS_SETTING = re.compile(r"(?:-c\s*|--)synchronous_commit\s*=\s*(\w+)")


def synchronous_options(options: str | None = None) -> str:
    """Return libpq `options` whose commits wait for the local WAL flush."""
    # Given `options`, libpq ignores PGOPTIONS: keep whichever it would have used.
    given = options or os.environ.get("PGOPTIONS", "")
    asked = _SYNCHRONOUS_SETTING.findall(given)
    if asked and asked[-1].lower() in _DURABLE_LEVELS:
        return given  # as durable or more (remote_apply waits for a standby too)
    return f"{given} {SYNCHRONOUS_COMMIT}".strip()  # the last `-c` wins


def schema_for(store_id: UUID) -> str:
    """Name the schema of a store: created by spillvault, named from the store id."""
    return SCHEMA_PREFIX + store_id.hex


def parse_dsn(dsn: str) -> dict[str, str]:
    """Split a libpq URI into the settings eventsourcing's module takes."""
    try:
        from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415 - optional extra
    except ImportError as error:
        msg = "a PostgreSQL store needs the extra: pip install 'spillvault[postgres]'"
        raise ArtifactLeaseJournalError(msg) from error
    try:
        parts: dict[str, Any] = conninfo_to_dict(dsn)
    except Exception as error:
        msg = "invalid PostgreSQL DSN (password not shown)"
        raise ArtifactLeaseJournalError(msg) from error
    unsupported = sorted(set(parts) - _SUPPORTED_DSN_KEYS)
    if unsupported:
        # eventsourcing's datastore takes only these keys; dropping the rest would
        # silently weaken e.g. sslmode, so refuse (names only, never values).
        msg = (
            f"PostgreSQL DSN parameter(s) not supported: {', '.join(unsupported)} "
            "(set them through libpq environment variables, e.g. PGSSLMODE)"
        )
        raise ArtifactLeaseJournalError(msg)
    missing = [key for key in ("dbname", "user") if not parts.get(key)]
    if missing:
        msg = f"PostgreSQL DSN lacks {missing[0]!r}"
        raise ArtifactLeaseJournalError(msg)
    return {
        "POSTGRES_DBNAME": str(parts["dbname"]),
        # Empty means libpq's default (the local unix socket), as in `psql`.
        "POSTGRES_HOST": str(parts.get("host") or ""),
        "POSTGRES_PORT": str(parts.get("port") or "5432"),
        "POSTGRES_USER": str(parts["user"]),
        "POSTGRES_PASSWORD": str(parts.get("password") or ""),
    }


def describe_server(settings: Mapping[str, str]) -> str:
    """Name a server and database for messages (never the password)."""
    user, host = settings["POSTGRES_USER"], settings["POSTGRES_HOST"]
    port, dbname = settings["POSTGRES_PORT"], settings["POSTGRES_DBNAME"]
    if host and not host.startswith("/"):
        return f"postgresql://{user}@{host}:{port}/{dbname}"
    return f"postgresql://{user}@/{dbname}?host={host}&port={port}"


def connect(settings: Mapping[str, str], **options: Any) -> Connection[TupleRow]:
    """Connect to the server `settings` (from `parse_dsn`) name, commits synchronous.

    `options` go to `psycopg.connect` (`autocommit`, `application_name`,
    keepalives); `connect_timeout` defaults to 10 s, and the libpq `options`
    always ask for `synchronous_commit=on`.
    """
    import psycopg  # noqa: PLC0415 - optional extra

    options.setdefault("connect_timeout", 10)
    return psycopg.connect(
        dbname=settings["POSTGRES_DBNAME"],
        host=settings["POSTGRES_HOST"],
        port=settings["POSTGRES_PORT"],
        user=settings["POSTGRES_USER"],
        password=settings["POSTGRES_PASSWORD"],
        **{**options, "options": synchronous_options(options.get("options"))},
    )


class PostgresBackend:
    """Locates, creates and opens a session's schema on a PostgreSQL server."""

    kind = "postgresql"

    def __init__(self, dsn: str, store_id: UUID) -> None:
        self._settings = parse_dsn(dsn)
        self._schema = schema_for(store_id)

    def describe(self) -> str:
        """Name the store for messages, without the password."""
        return f"{describe_server(self._settings)} schema {self._schema}"

    def exists(self) -> bool:
        """Say whether the session's schema exists."""
        rows = self._admin(
            "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
            (self._schema,),
        )
        return bool(rows)

    def create(self) -> None:
        """Create the session's schema (tables come with the first open)."""
        from psycopg import sql  # noqa: PLC0415 - optional extra

        self._admin(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                sql.Identifier(self._schema)
            )
        )

    def open(self) -> SessionStore:
        """Open eventsourcing's PostgreSQL module on the session's schema."""
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            **self._settings,
            "POSTGRES_SCHEMA": self._schema,
            "POSTGRES_CONNECT_TIMEOUT": "10",
            "POSTGRES_POOL_SIZE": "2",
            "POSTGRES_MAX_OVERFLOW": "4",
        }
        return SessionStore(env, factory=_synchronous_factory)

    def _admin(self, query: Any, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg  # noqa: PLC0415 - optional extra

        try:
            with connect(self._settings, autocommit=True) as connection:
                cursor = connection.execute(query, params)
                return cursor.fetchall() if cursor.description else []
        except psycopg.Error as error:
            msg = f"PostgreSQL event store unavailable ({self.describe()}): {error}"
            raise ArtifactLeaseJournalError(msg) from error


def _synchronous_factory(env: Environment) -> InfrastructureFactory[Any]:
    """Build eventsourcing's PostgreSQL factory; its pool connects with `options`."""
    from eventsourcing.postgres import PostgresFactory  # noqa: PLC0415 - optional extra

    factory = PostgresFactory(env=env)
    # The pool is built closed: no connection exists yet, and every one it
    # opens, now or after a reconnect, takes these connection parameters.
    kwargs = factory.datastore.pool.kwargs
    if not isinstance(kwargs, dict):  # pragma: no cover - eventsourcing 9.5 passes one
        factory.close()
        msg = "cannot ask eventsourcing's PostgreSQL pool for synchronous commits"
        raise ArtifactLeaseJournalError(msg)
    kwargs["options"] = synchronous_options(kwargs.get("options"))
    return factory
