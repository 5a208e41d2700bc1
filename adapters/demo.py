"""`spillvault demo`: a short, real run of what exists, in a throwaway session."""

from __future__ import annotations

import hashlib
import os
import tempfile
from datetime import timedelta
from typing import TYPE_CHECKING

from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)

from .session import open_session
from .sqlite_store import STORE_NAME

if TYPE_CHECKING:
    from collections.abc import Callable

    from .session import Session

SAMPLE = b"FAILED tests/test_gc.py::test_fail_closed - AssertionError\n" * 1000


def run_demo(parent: str | None, *, out: Callable[[str], object]) -> int:
    """Run the tour under `parent` (a new temp dir when None); return 0."""
    with tempfile.TemporaryDirectory(prefix="spillvault-demo-", dir=parent) as tmp:
        session_dir = os.path.join(tmp, "demo-session")
        _lease_round_trip(session_dir, out)
        _refusal(session_dir, out)
    return 0


def _lease_round_trip(session_dir: str, out: Callable[[str], object]) -> None:
    with open_session(session_dir) as session:
        out(
            f"[session] created {session.session_id} ({session.store_kind} store "
            f"{session.store_id[:8]}…, marker session.json written last)\n"
        )
        claim = _sample_claim(session)
        now = session.clock.now()
        store = session.store
        store.prepare_lease(ArtifactLeaseTransaction("memory-ref-1", claim, now))
        out("[lease] memory-ref-1 prepared  — protects its artifact with no expiry\n")
        store.commit_lease("memory-ref-1", now + timedelta(seconds=1))
        out("[lease] memory-ref-1 committed — the memory owner holds the reference\n")
        store.release_lease("memory-ref-1", now + timedelta(seconds=2))
        out("[lease] memory-ref-1 released  — the reference was deleted\n")
        store.prepare_lease(ArtifactLeaseTransaction("memory-ref-2", claim, now))
        store.abort_lease("memory-ref-2", now + timedelta(seconds=3))
        out("[lease] memory-ref-2 prepared → aborted (the owner never wrote it)\n")
        try:
            store.commit_lease("memory-ref-2", now)
        except ArtifactLeaseJournalError as error:
            out(f"[lease] refused: {error}\n")
    with open_session(session_dir) as session:
        out("[reopen] state rebuilt from the stored events:\n")
        for note in session.store.notifications():
            out(f"    #{note.id} {note.topic}\n")
        for tx in ("memory-ref-1", "memory-ref-2"):
            lease = session.store.get_lease(tx)
            phases = " → ".join(lease.phase_history)
            out(f"    {tx}: {phases} (version {lease.version})\n")


def _refusal(session_dir: str, out: Callable[[str], object]) -> None:
    os.unlink(os.path.join(session_dir, STORE_NAME))
    out(f"[tamper] removed {STORE_NAME}; reopening…\n")
    try:
        open_session(session_dir).close()
    except ArtifactLeaseJournalError as error:
        out(f"[refused] {error}\n")
    else:  # pragma: no cover - would be a bug, and the demo says so loudly
        out("[BUG] a session without its store was opened\n")


def _sample_claim(session: Session) -> ArtifactRetentionClaim:
    digest = hashlib.sha256(SAMPLE).hexdigest()
    source = ArtifactSourceId.for_artifact(
        session.session_id, "tool_result_001.txt", digest
    )
    return ArtifactRetentionClaim(str(source), digest)
