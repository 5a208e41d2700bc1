"""The journal of a read-only session view: refuses each write before it starts.

The store refuses every event of a read-only view anyway; these operations
are refused first because they would otherwise reach a memory owner (a
publisher, a remover, a fence's seal) or rewrite the journal file before the
store said no.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from spillvault.adapters.services.retention_journal import SessionRetentionJournal

if TYPE_CHECKING:
    from collections.abc import Callable


def _refusing(action: str) -> Callable[..., NoReturn]:
    def refuse(self: SessionRetentionJournal, *_: object, **__: object) -> NoReturn:
        raise self.session.read_only_error(action)

    refuse.__doc__ = f"Refuse to {action}: the session is opened read-only."
    return refuse


class RefusingWrites(SessionRetentionJournal):
    """A retention journal over a read-only view: reads, verifies, refuses."""

    prepare = _refusing("prepare a lease")
    commit = _refusing("commit a lease")
    release = _refusing("release a lease")
    abort = _refusing("abort a lease")
    publish_reference = _refusing("publish a reference")
    remove_reference = _refusing("remove a reference")
    repair = _refusing("repair the journal")
    reconcile_reference = _refusing("reconcile a lease")
    reconcile_pending = _refusing("reconcile leases")
    reconcile_releases = _refusing("reconcile leases")
    resolve = _refusing("resolve a lease")


__all__ = ["RefusingWrites"]
