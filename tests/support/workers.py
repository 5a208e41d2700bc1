"""Functions run in child processes (spawned children import them by name)."""

from __future__ import annotations

from typing import Any

from spillvault.adapters.session import open_session

from support.leases import transaction


def create_and_prepare(path: str, tx: str, start: Any, results: Any) -> None:
    """Wait for the start signal, open (or create) the session, prepare a lease."""
    start.wait()
    with open_session(path) as session:
        session.store.prepare_lease(transaction(session.session_id, tx))
        results.put(session.store_id)


def try_lock(path: str, results: Any) -> None:
    """Report whether `.lock` in `path` can be flocked without waiting."""
    import fcntl  # noqa: PLC0415
    import os  # noqa: PLC0415

    fd = os.open(os.path.join(path, ".lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        results.put("blocked")
    else:
        results.put("acquired")
    finally:
        os.close(fd)


def reserve_numbers(path: str, count: int, start: Any, results: Any) -> None:
    """Reserve `count` artifact numbers and report them."""
    start.wait()
    with open_session(path) as session:
        results.put([session.store.reserve_artifact_number() for _ in range(count)])
