"""The session lock across hosts: a PostgreSQL advisory lock (S4.4)."""

from __future__ import annotations

import gc
import socket
import subprocess
import sys
import threading
import time
import uuid
import warnings
import weakref
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.storage.advisory_lock import (
    AdvisoryLock,
    advisory_lock_for,
    lock_key,
)
from spillvault.domain.errors import ArtifactLeaseJournalError

from support.pgserver import in_ci
from support.tiers import HANG_GUARD_SECONDS

try:
    import psycopg
except ImportError:  # the postgres extra is missing: an error in CI, else a skip
    if in_ci():
        raise
    pytest.skip(
        "needs the postgres extra: pip install 'spillvault[postgres]'",
        allow_module_level=True,
    )

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.postgres

SHORT_WAIT = 0.5  # only where the timeout is the behaviour under test
POLLS = 10_000  # x 0.01 s at most: a hang guard, never reached when it works
STORE_A = "6f1c1e52-3d4b-4c8e-9a57-0d2b8f6e1a01"
STORE_B = "0b7d9c3e-8a21-4f6d-b5c4-7e9a1d2c3b02"

CHILD = """
import sys
from spillvault.adapters.storage.advisory_lock import AdvisoryLock
from spillvault.domain.errors import ArtifactLeaseJournalError

lock = AdvisoryLock(sys.argv[1], sys.argv[2], wait_seconds=float(sys.argv[3]))
try:
    lock.acquire()
except ArtifactLeaseJournalError as error:
    print(error)
    sys.exit(3)
lock.release()
lock.close()
print("acquired")
"""


# helpers -------------------------------------------------------------------


def other_process_locks(dsn: str, store_id: str) -> tuple[int, str]:
    """Run a child that tries the lock (briefly); return its exit code and output."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, dsn, store_id, str(SHORT_WAIT)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_SECONDS,
        check=False,
    )
    assert result.returncode in {0, 3}, result.stderr
    return result.returncode, result.stdout.strip()


def free_on_server(dsn: str, store_id: str) -> bool:
    """Say whether another server session could take the key right now."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT pg_try_advisory_lock(%s)", (lock_key(store_id),)
        ).fetchone()
        assert row is not None
        if row[0]:
            connection.execute("SELECT pg_advisory_unlock(%s)", (lock_key(store_id),))
        return bool(row[0])


def holder_pid(dsn: str, store_id: str) -> int:
    """Return the backend pid holding the key (a bigint key is classid:objid, 1)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s",
            (lock_key(store_id),),
        ).fetchall()
    assert len(rows) == 1
    return int(rows[0][0])


def terminate(dsn: str, pid: int) -> None:
    """End a backend and wait until it has exited (and so dropped its locks)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT pg_terminate_backend(%s, %s)", (pid, int(HANG_GUARD_SECONDS * 1000))
        ).fetchone()
    assert row == (True,)


def poll(condition: Callable[[], bool]) -> bool:
    for _ in range(POLLS):
        if condition():
            return True
        time.sleep(0.01)
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def blocked_in_acquire(thread: threading.Thread) -> bool:
    """Say whether `thread` is inside `acquire` (its mutex wait runs no Python)."""
    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and frame.f_code is AdvisoryLock.acquire.__code__


# the key -------------------------------------------------------------------


def test_lock_key_is_stable_signed_and_distinct() -> None:
    # Pinned: hosts running different versions must agree on the key.
    assert lock_key(STORE_A) == lock_key(STORE_A.upper()) == lock_key(f"{{{STORE_A}}}")
    assert lock_key(STORE_A) == 5939817534928361107
    assert lock_key(STORE_A) != lock_key(STORE_B)
    keys = {lock_key(str(uuid.UUID(int=n))) for n in range(256)}
    assert len(keys) == 256
    assert all(-(2**63) <= key < 2**63 for key in keys)
    assert any(key < 0 for key in keys)


def test_a_negative_key_is_a_valid_bigint(postgres_dsn: str) -> None:
    store_id = next(
        str(uuid.UUID(int=n)) for n in range(256) if lock_key(str(uuid.UUID(int=n))) < 0
    )
    lock = AdvisoryLock(postgres_dsn, store_id)
    with lock:
        assert not free_on_server(postgres_dsn, store_id)
    assert free_on_server(postgres_dsn, store_id)
    lock.close()


# within one process ----------------------------------------------------------


def test_lock_is_reentrant_and_released_by_the_last_release(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    assert not lock.held
    with lock:
        with lock:
            assert lock.held
            assert not free_on_server(postgres_dsn, STORE_A)
        assert lock.held
        assert not free_on_server(postgres_dsn, STORE_A)
    assert not lock.held
    assert free_on_server(postgres_dsn, STORE_A)
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()
    lock.close()


def test_lock_excludes_other_threads(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    releasing = threading.Event()
    saw: list[bool] = []

    def competitor() -> None:
        with lock:
            saw.append(releasing.is_set())

    with lock:
        thread = threading.Thread(target=competitor)
        thread.start()
        assert poll(lambda: blocked_in_acquire(thread))
        assert saw == []
        releasing.set()
    thread.join(HANG_GUARD_SECONDS)
    assert saw == [True]
    assert free_on_server(postgres_dsn, STORE_A)
    lock.close()


def test_held_is_per_thread(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    seen: list[bool] = []
    with lock:
        thread = threading.Thread(target=lambda: seen.append(lock.held))
        thread.start()
        thread.join(HANG_GUARD_SECONDS)
        assert lock.held
    assert seen == [False]
    with pytest.raises(RuntimeError, match="does not hold"):
        lock.release()  # a thread that does not hold it cannot drop it either
    lock.close()


def test_a_release_from_another_thread_is_refused(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    errors: list[BaseException] = []

    def releaser() -> None:
        try:
            lock.release()
        except RuntimeError as error:
            errors.append(error)

    with lock:
        thread = threading.Thread(target=releaser)
        thread.start()
        thread.join(HANG_GUARD_SECONDS)
        assert lock.held
        assert not free_on_server(postgres_dsn, STORE_A)
    assert len(errors) == 1
    assert free_on_server(postgres_dsn, STORE_A)
    lock.close()


def test_registry_shares_one_lock_per_server_and_store(postgres_dsn: str) -> None:
    lock = advisory_lock_for(postgres_dsn, STORE_A)
    with_password = postgres_dsn.replace("postgres@", "postgres:ignored@", 1)
    assert with_password != postgres_dsn
    assert advisory_lock_for(postgres_dsn, STORE_A) is lock
    assert advisory_lock_for(with_password, STORE_A.upper()) is lock
    assert advisory_lock_for(postgres_dsn, STORE_B) is not lock
    forgotten = weakref.ref(lock)
    del lock
    gc.collect()
    assert forgotten() is None  # the registry keeps no lock alive


def test_store_ids_do_not_conflict(postgres_dsn: str) -> None:
    one = AdvisoryLock(postgres_dsn, STORE_A, wait_seconds=SHORT_WAIT)
    two = AdvisoryLock(postgres_dsn, STORE_B, wait_seconds=SHORT_WAIT)
    with one, two:
        assert one.held
        assert two.held
    one.close()
    two.close()


# across processes and hosts ----------------------------------------------------


def test_lock_excludes_other_processes(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    with lock:
        code, output = other_process_locks(postgres_dsn, STORE_A)
        assert code == 3
        assert "locked by another process or host" in output
        assert f"waited {SHORT_WAIT:g} s" in output
        with lock:
            assert other_process_locks(postgres_dsn, STORE_A)[0] == 3
    assert other_process_locks(postgres_dsn, STORE_A) == (0, "acquired")
    lock.close()


def test_a_timed_out_wait_leaves_the_lock_usable(postgres_dsn: str) -> None:
    # Two objects, two connections: as two hosts would see one session.
    here = AdvisoryLock(postgres_dsn, STORE_A)
    there = AdvisoryLock(postgres_dsn, STORE_A, wait_seconds=SHORT_WAIT)
    with here:
        with pytest.raises(ArtifactLeaseJournalError, match="locked by another"):
            there.acquire()
        assert not there.held
        with pytest.raises(ArtifactLeaseJournalError, match="locked by another"):
            there.acquire()
    with there:
        assert there.held
        assert not free_on_server(postgres_dsn, STORE_A)
    here.close()
    there.close()


# failures ----------------------------------------------------------------------


def test_an_unreachable_server_is_a_journal_error(postgres_dsn: str) -> None:
    port = free_port()
    dsn = f"postgresql://someone:s3cret@127.0.0.1:{port}/postgres"
    lock = AdvisoryLock(dsn, STORE_A, connect_timeout=2)
    for _ in range(2):  # a failed acquire leaves nothing behind
        with pytest.raises(ArtifactLeaseJournalError) as caught:
            lock.acquire()
        message = str(caught.value)
        assert f"postgresql://someone@127.0.0.1:{port}/postgres" in message
        assert "s3cret" not in message
        assert not lock.held
    lock.close()


def test_a_connection_lost_while_held_is_reported_at_release(
    postgres_dsn: str,
) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    lock.acquire()
    lock.acquire()
    terminate(postgres_dsn, holder_pid(postgres_dsn, STORE_A))
    assert free_on_server(postgres_dsn, STORE_A)  # the server dropped it
    lock.release()  # not the outermost: the server is not asked
    with pytest.raises(ArtifactLeaseJournalError, match="may have been lost"):
        lock.release()
    assert not lock.held
    with lock:  # a fresh connection
        assert not free_on_server(postgres_dsn, STORE_A)
    lock.close()


def test_a_connection_lost_between_uses_is_replaced(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    with lock:
        pid = holder_pid(postgres_dsn, STORE_A)
    terminate(postgres_dsn, pid)
    with lock:
        assert holder_pid(postgres_dsn, STORE_A) != pid
    lock.close()


def test_close_is_idempotent_and_refused_while_held(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    lock.close()
    with lock:
        with pytest.raises(RuntimeError, match="holds"):
            lock.close()
        assert not free_on_server(postgres_dsn, STORE_A)
    lock.close()
    lock.close()
    with lock:  # reopened
        assert not free_on_server(postgres_dsn, STORE_A)
    lock.close()


def test_a_forgotten_lock_closes_its_connection(postgres_dsn: str) -> None:
    lock = AdvisoryLock(postgres_dsn, STORE_A)
    lock.acquire()
    assert not free_on_server(postgres_dsn, STORE_A)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lock
        gc.collect()
    # Closed by the lock, not left to psycopg, which warns of an open connection.
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    # The server ends the session on its own time once the client has hung up.
    assert poll(lambda: free_on_server(postgres_dsn, STORE_A))


def test_wait_seconds_must_bound_the_wait(postgres_dsn: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        AdvisoryLock(postgres_dsn, STORE_A, wait_seconds=0)
