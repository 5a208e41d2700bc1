"""The session-scoped `postgres_dsn` fixture (import it into conftest.py).

One throwaway server serves the whole test session and is stopped at its end.
Without the server binaries the tests are skipped, except in CI (`CI` set),
where that is an error: the PostgreSQL tests must run there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from support.pgserver import (
    PostgresServer,
    PostgresUnavailable,
    in_ci,
    start_postgres,
    wait_for_connection,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping


def server_or_skip(settings: Mapping[str, str] | None = None) -> PostgresServer:
    """Start a fresh, connectable server; skip without the binaries (fail in CI)."""
    try:
        server = start_postgres(settings=settings)
    except PostgresUnavailable as error:
        if in_ci():
            msg = f"CI must run the PostgreSQL tests: {error}"
            raise RuntimeError(msg) from error
        pytest.skip(str(error))
    try:
        wait_for_connection(server.dsn)
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A DSN (superuser `postgres`, trust auth, unix socket) of a fresh server."""
    server = server_or_skip()
    try:
        yield server.dsn
    finally:
        server.stop()
