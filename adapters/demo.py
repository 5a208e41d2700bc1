"""`spillvault demo`: a short, real run of what exists, in a throwaway session."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from typing import TYPE_CHECKING

from spillvault.domain.errors import ArtifactLeaseJournalError
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from .session import open_session
from .sqlite_owner import SQLiteOwner
from .sqlite_store import STORE_NAME

if TYPE_CHECKING:
    from collections.abc import Callable

    from spillvault.domain.cleanup import ArtifactCleanupDecision
    from spillvault.domain.values import ArtifactReference

FAILURE_LINE = 11_874  # 1-based, deep in the middle of the demo's grep output


def run_demo(parent: str | None, *, out: Callable[[str], object]) -> int:
    """Run the tour under `parent` (a new temp dir when None); return 0."""
    with tempfile.TemporaryDirectory(prefix="spillvault-demo-", dir=parent) as tmp:
        session_dir = os.path.join(tmp, "demo-session")
        artifact = _spill_and_page_fault(session_dir, out)
        _lease_round_trip(session_dir, artifact, out)
        _garbage_collection(session_dir, out)
        _refusal(session_dir, out)
    return 0


def _grep_output() -> str:
    """About 1 MB of what `grep -rn` over a big repository prints."""
    lines = [
        f"src/module_{i % 97}/file_{i % 1013}.py:{i % 4000 + 1}: "
        f"value = compute(item_{i}, limit={i % 50})"
        for i in range(16000)
    ]
    lines[FAILURE_LINE - 1] = (
        "tests/test_gc.py:212: AssertionError: artifact deleted while leased"
    )
    return "\n".join(lines) + "\n"


def _spill_and_page_fault(
    session_dir: str, out: Callable[[str], object]
) -> ArtifactReference:
    with open_session(session_dir) as session:
        out(
            f"[session] created {session.session_id} ({session.store_kind} store "
            f"{session.store_id[:8]}…, marker session.json written last)\n"
        )
        ext = session.externalizer
        text = _grep_output()
        outcome = ext.process(text, "grep", tool_use_id="toolu_demo_1")
        artifact = outcome.artifact
        if artifact is None:  # pragma: no cover - the demo's input is over the limit
            msg = f"the demo's output was not spilled ({outcome.reason})"
            raise RuntimeError(msg)
        shown = str(outcome.content)
        out(
            f"[externalize] grep: {_size(len(text.encode()))} → "
            f"{_size(len(shown.encode()))} in context ({outcome.reason}; "
            f"sha256 {artifact.content_sha256[:12]}…)\n"
        )
        for line in shown.splitlines():
            if line.startswith("line "):
                out(f"    key line kept in the preview → {line}\n")
        offset = FAILURE_LINE - 2
        page = ext.read_artifact(artifact, offset=offset, limit=3)
        out(f"[page fault] read_artifact(offset={offset}, limit=3), verified:\n")
        for number, line in enumerate(page.split("\n"), start=FAILURE_LINE - 1):
            out(f"    {number}: {line}\n")
        for match in ext.grep_artifact(artifact, "AssertionError").matches:
            out(f"[grep] 'AssertionError' → line {match.line_number}\n")
        return artifact


def _size(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:.1f}MB"
    return f"{count / 1000:.0f}KB"


def _lease_round_trip(
    session_dir: str, artifact: ArtifactReference, out: Callable[[str], object]
) -> None:
    memory = artifact.for_memory()
    claim = ArtifactRetentionClaim.from_memory_reference(memory)
    owner = SQLiteOwner(os.path.join(os.path.dirname(session_dir), "memory.sqlite3"))
    with open_session(session_dir) as session:
        journal = session.journal
        publisher = owner.publisher(memory, "memory-ref-1")
        journal.publish_reference(claim, publisher, transaction_id="memory-ref-1")
        out("[lease] memory-ref-1 prepared → written by the SQLite owner → committed\n")

        def lost_receipt() -> None:
            owner.publish("memory-ref-2", memory)
            msg = "the owner wrote it, but its reply never came"
            raise TimeoutError(msg)

        try:
            journal.publish_reference(
                claim, lost_receipt, transaction_id="memory-ref-2"
            )
        except TimeoutError as error:
            out(f"[lease] memory-ref-2: {error}; the process 'crashes' here\n")
    with open_session(session_dir) as session:
        journal = session.journal
        pending = journal.recover().pending_transaction_ids
        out(f"[reopen] prepared, protecting with no expiry: {pending}\n")
        for report in journal.reconcile_pending(owner):
            out(
                f"[reconcile] {report.transaction_id}: {report.status.value} "
                f"({report.reason}, owner generation {report.observed_generation})\n"
            )
        journal.remove_reference("memory-ref-1", owner.remover("memory-ref-1"))
        out("[lease] memory-ref-1 removed by the owner first, then released\n")
        try:
            journal.commit("memory-ref-1")
        except ArtifactLeaseJournalError as error:
            out(f"[lease] refused: {error}\n")
        checked = journal.verify()
        out(f"[journal] {checked.records} chained records match the event store\n")


def _garbage_collection(session_dir: str, out: Callable[[str], object]) -> None:
    with open_session(session_dir) as session:
        ext = session.externalizer
        scratch = ext.process("scratch output\n" * 20_000, "bash").artifact
        later = session.clock.now() + timedelta(days=2)  # past the 24 h orphan TTL
        policy = ArtifactCleanupPolicy(dry_run=False)
        plan = ext.plan_cleanup_from_journal(session.journal, policy=policy, now=later)
        for decision in plan.decisions:
            out(f"[gc plan] {_decision(decision)}\n")
        report = ext.apply_cleanup_from_journal(plan, session.journal, now=later)
        for decision in report.decisions:
            out(f"[gc apply] {_decision(decision)}\n")
        if scratch is not None and os.path.exists(scratch.path):  # pragma: no cover
            out("[BUG] the unreferenced artifact is still there\n")


def _decision(decision: ArtifactCleanupDecision) -> str:
    return f"{decision.filename}: {decision.status.value} ({decision.reason})"


def _refusal(session_dir: str, out: Callable[[str], object]) -> None:
    os.unlink(os.path.join(session_dir, STORE_NAME))
    out(f"[tamper] removed {STORE_NAME}; reopening…\n")
    try:
        open_session(session_dir).close()
    except ArtifactLeaseJournalError as error:
        out(f"[refused] {error}\n")
    else:  # pragma: no cover - would be a bug, and the demo says so loudly
        out("[BUG] a session without its store was opened\n")
