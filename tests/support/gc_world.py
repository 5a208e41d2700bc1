"""The world the GC tests share: a session, a clock, a sentinel and small helpers."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import (
    Session,
    open_session,
)
from spillvault.domain.enums import ArtifactCleanupReason, ArtifactCleanupStatus
from spillvault.domain.values import (
    ArtifactCleanupPolicy,
    ArtifactReference,
    ArtifactRetentionClaim,
)

from support.fakes import FakeClock

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from spillvault.domain.cleanup import (
        ArtifactCleanupDecision,
        ArtifactCleanupPlan,
        ArtifactCleanupReport,
    )


Status = ArtifactCleanupStatus
TTL = 3600.0
OLD = timedelta(days=2)


# ----------------------------------------------------------------------- helpers


@pytest.fixture
def clock() -> FakeClock:
    # Artifacts get real mtimes: the clock starts at the real time.
    return FakeClock(datetime.now(UTC))


@pytest.fixture
def session(session_dir: Path, clock: FakeClock) -> Iterator[Session]:
    with open_session(session_dir, clock=clock) as opened:
        yield opened


@pytest.fixture
def sentinel(tmp_path: Path) -> Path:
    """A file outside the session that GC must never touch."""
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "sentinel.txt"
    path.write_bytes(b"outside the session\n" * 100)
    return path


def assert_sentinel_intact(sentinel: Path) -> None:
    assert sentinel.read_bytes() == b"outside the session\n" * 100
    assert stat.S_ISREG(sentinel.lstat().st_mode)


def deleting(**overrides: Any) -> ArtifactCleanupPolicy:
    return ArtifactCleanupPolicy(orphan_ttl_seconds=TTL, dry_run=False, **overrides)


def stored(session: Session, tag: str) -> ArtifactReference:
    text = f"{tag}: a long tool output line\n" * 5000
    return session.externalizer.externalize(text, "bash").artifact


def name_of(ref: ArtifactReference) -> str:
    return os.path.basename(ref.path)


def claim_of(ref: ArtifactReference, **kwargs: Any) -> ArtifactRetentionClaim:
    return ArtifactRetentionClaim.from_memory_reference(ref.for_memory(), **kwargs)


def committed(session: Session, ref: ArtifactReference, **kwargs: Any) -> str:
    """Publish a reference through the journal (PREPARED, then COMMITTED)."""
    transaction, _ = session.journal.publish_reference(
        claim_of(ref, **kwargs), lambda: None
    )
    return transaction.transaction_id


def plan_gc(
    session: Session, *, policy: ArtifactCleanupPolicy, now: datetime
) -> ArtifactCleanupPlan:
    with must_finish_within(30):
        return session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=policy, now=now
        )


def apply_gc(
    session: Session, plan: ArtifactCleanupPlan, now: datetime
) -> ArtifactCleanupReport:
    with must_finish_within(30):
        return session.externalizer.apply_cleanup_from_journal(
            plan, session.journal, now=now
        )


@contextmanager
def must_finish_within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened without O_NONBLOCK would block)."""

    def hung(_signum: int, _frame: object) -> None:
        msg = f"did not finish within {seconds} s"
        raise TimeoutError(msg)

    pending = signal.alarm(0)
    if pending:  # nested: the outer guard keeps running
        signal.alarm(pending)
        yield
        return
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def by_name(
    result: ArtifactCleanupPlan | ArtifactCleanupReport,
) -> dict[str, ArtifactCleanupDecision]:
    names = [d.filename for d in result.decisions]
    assert len(names) == len(set(names)), "one decision per entry"
    return {d.filename: d for d in result.decisions}


def statuses(result: ArtifactCleanupPlan | ArtifactCleanupReport) -> dict[str, Status]:
    return {name: d.status for name, d in by_name(result).items()}


def applied(
    report: ArtifactCleanupReport, plan: ArtifactCleanupPlan
) -> dict[str, Status]:
    """The candidates' statuses; every other decision of the plan is carried as is."""
    assert [d.filename for d in report.decisions] == [
        d.filename for d in plan.decisions
    ]
    assert report.planned_at == plan.planned_at
    candidates = {d.filename for d in plan.candidates()}
    for planned, reported in zip(plan.decisions, report.decisions, strict=True):
        if planned.filename not in candidates:
            assert reported == planned
    return {n: s for n, s in statuses(report).items() if n in candidates}


def assert_readable(decision: ArtifactCleanupDecision, *paths: Path) -> None:
    """A reason is a code; its detail a phrase a person can read, holding no path."""
    assert decision.reason in set(ArtifactCleanupReason), decision
    assert re.fullmatch(r"[a-z]+(_[a-z]+)+", decision.reason), decision
    detail = decision.detail
    assert re.search(r"[A-Za-z]{2,} [A-Za-z]{2,}", detail), decision
    assert detail.isprintable(), decision
    for path in paths:
        assert str(path) not in detail, decision


def assert_path_free(data: dict[str, Any], *paths: Path) -> None:
    text = json.dumps(data)
    assert json.loads(text) == data
    for path in paths:
        assert str(path) not in text


def state_of(session: Session, name: str) -> str | None:
    artifact = session.store.get_artifact(name)
    return None if artifact is None else artifact.state


def private_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def set_mtime(path: Path, when: datetime) -> None:
    ns = int(when.timestamp() * 1_000_000_000)
    os.utime(path, ns=(ns, ns), follow_symlinks=False)


def flip_first_byte(path: Path, *, keep_mtime: bool = False) -> None:
    """Change one byte in place: same inode, same size."""
    info = path.stat()
    with open(path, "r+b") as file:
        first = file.read(1)
        file.seek(0)
        file.write(bytes([first[0] ^ 0x20]))
    if keep_mtime:
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


Entry = tuple[int, int, int, bytes | None]


def entries(directory: Path) -> dict[str, Entry]:
    """Every entry by name: inode, mode, mtime and (regular files) bytes; lstat only."""
    found: dict[str, Entry] = {}
    for name in os.listdir(directory):
        info = (directory / name).lstat()
        data = (directory / name).read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[name] = (info.st_ino, info.st_mode, info.st_mtime_ns, data)
    return found


def quarantine_of(session_dir: Path) -> list[str]:
    return sorted(os.listdir(session_dir / ".quarantine"))
