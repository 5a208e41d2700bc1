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


def publish_many(  # noqa: PLR0917 - one child's whole job
    path: str, claim: dict[str, Any], prefix: str, count: int, start: Any, results: Any
) -> None:
    """Wait for the start signal, then publish `count` references to one artifact."""
    from spillvault.domain.values import ArtifactRetentionClaim  # noqa: PLC0415

    start.wait()
    with open_session(path) as session:
        for n in range(count):
            session.journal.publish_reference(
                ArtifactRetentionClaim.from_dict(claim),
                lambda: None,
                transaction_id=f"{prefix}-{n}",
            )
    results.put(prefix)


def reconcile_with_sqlite_owner(
    path: str, owner_path: str, tx: str, start: Any, results: Any
) -> None:
    """Wait for the start signal, reconcile one lease, report its status."""
    from spillvault.adapters.owners.sqlite_owner import SQLiteOwner  # noqa: PLC0415

    owner = SQLiteOwner(owner_path)
    start.wait()
    with open_session(path) as session:
        results.put(session.journal.reconcile_reference(tx, owner).status.value)
