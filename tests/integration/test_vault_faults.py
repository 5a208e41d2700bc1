"""Faults of a vault (issue 18): the S3 server killed or frozen, a GC host dying.

Each test runs a SeaweedFS of its own, so it can kill it (SIGKILL, as a crash
would), freeze it (SIGSTOP: up, but silent) and start it again on the same
ports and data. The faults are placed by wrapping one S3 call of the shared
client, so they land at an exact step, never by timing.
"""

from __future__ import annotations

import itertools
import os
import signal
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.s3_client import TIMEOUT_ENV, s3_client
from spillvault.domain.enums import ArtifactCleanupStatus, ArtifactState
from spillvault.domain.errors import ObjectStoreError
from spillvault.domain.values import ArtifactCleanupPolicy

from support.seaweedfs import SeaweedFS, s3_environment

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from spillvault.adapters.session import Session

BIG = "".join(f"line {n} of a long build log\n" for n in range(700_000))  # ~20 MB
_buckets = itertools.count(1)


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[SeaweedFS]:
    """A SeaweedFS of this test's own."""
    server = SeaweedFS(tmp_path / "weed")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def vault(
    weed: SeaweedFS, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The variables of a vault on this test's server, set for this process."""
    for name, value in s3_environment(weed.server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    bucket = f"faults-{next(_buckets)}"
    s3_client().create_bucket(Bucket=bucket)
    return {"artifacts": f"s3://{bucket}/f", "event_store": postgres_dsn}


class _Clock:
    """A clock that says `at` (now: objects age by the server's clock, not a date)."""

    def __init__(self, at: datetime | None = None) -> None:
        self.at = at or datetime.now(UTC)

    def now(self) -> datetime:
        return self.at


def _open(vault: dict[str, str], name: str, clock: _Clock, **kw: Any) -> Session:
    return open_session(name, clock=clock, **vault, **kw)


def _after_call(
    monkeypatch: pytest.MonkeyPatch, method: str, then: Callable[[], None]
) -> None:
    """Run `then` once, right after the first call of the client's `method`."""
    client = s3_client()
    real = getattr(client, method)
    done: list[bool] = []

    def wrapped(**kwargs: Any) -> Any:
        answer = real(**kwargs)
        if not done:
            done.append(True)
            then()
        return answer

    monkeypatch.setattr(client, method, wrapped)


def _before_call(
    monkeypatch: pytest.MonkeyPatch, method: str, first: Callable[[], None]
) -> None:
    """Run `first` once, right before the first call of the client's `method`."""
    client = s3_client()
    real = getattr(client, method)
    done: list[bool] = []

    def wrapped(**kwargs: Any) -> Any:
        if not done:
            done.append(True)
            first()
        return real(**kwargs)

    monkeypatch.setattr(client, method, wrapped)


def test_the_server_killed_mid_upload_keeps_the_original_and_shows_no_object(
    vault: dict[str, str], weed: SeaweedFS
) -> None:
    clock = _Clock()
    with (
        _open(vault, "upload-1", clock) as session,
        pytest.MonkeyPatch.context() as patch,
    ):
        _after_call(patch, "upload_part", weed.kill)
        outcome = session.externalizer.process(BIG, "bash")
        assert outcome.reason == "store_failed"
        assert outcome.content == BIG  # the original stays inline
        assert outcome.artifact is None
    weed.start()
    # An upload's age is the server's: measured from its clock, a day on.
    later_clock = _Clock(datetime.now(UTC) + timedelta(hours=25))
    with _open(vault, "upload-1", later_clock) as later:
        store = later.externalizer.store
        assert store.object_names() == []  # type: ignore[attr-defined]
        # The killed server could not abort the upload; recovery did, once old.
        assert later.recovery is not None
        assert later.recovery.removed_tmp == ["tool_result_001.txt"]
        assert store.unfinished_uploads() == []  # type: ignore[attr-defined]
        events = [n.topic for n in later.store.notifications()]
        assert not [t for t in events if t.startswith("spillvault:Artifact.")]


def test_a_stopped_or_frozen_server_is_a_typed_error_never_a_hang(
    vault: dict[str, str], weed: SeaweedFS
) -> None:
    with _open(vault, "down-1", _Clock()) as session:
        handle = session.externalizer.process(BIG[:200_000], "bash").artifact
        assert handle is not None
        processes = _pids_of(weed)
        for pid in processes:
            os.kill(pid, signal.SIGSTOP)  # up, accepting, silent
        try:
            with pytest.raises(ObjectStoreError, match="did not answer"):
                session.externalizer.read_artifact(handle.handle, 100, 5)
        finally:
            for pid in processes:
                os.kill(pid, signal.SIGCONT)
        weed.kill()
        with pytest.raises(ObjectStoreError):
            session.externalizer.read_artifact(handle.handle, 100, 5)
        failed = session.externalizer.process(BIG[:300_000], "bash")
        assert failed.reason == "store_failed"


def _pids_of(weed: SeaweedFS) -> list[int]:
    process = weed._process
    assert process is not None
    return [process.pid]


def _gc(session: Session) -> Any:
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)
    ext = session.externalizer
    # An object's age is the server's (its Last-Modified), as a file's is its mtime.
    later = datetime.now(UTC) + timedelta(days=1)
    plan = ext.plan_cleanup_from_journal(session.journal, policy=policy, now=later)
    return ext.apply_cleanup_from_journal(plan, session.journal, now=later)


def test_the_server_killed_before_a_delete_keeps_the_object_and_its_event(
    vault: dict[str, str], weed: SeaweedFS
) -> None:
    clock = _Clock()
    with _open(vault, "gc-kill-1", clock) as session:
        artifact = session.externalizer.process(BIG[:400_000], "bash").artifact
        assert artifact is not None
        name = session.externalizer.store.resolve(artifact.handle)
        with pytest.MonkeyPatch.context() as patch:
            _before_call(patch, "delete_object", weed.kill)
            report = _gc(session)
        assert report.error is not None  # the run stopped on the I/O error
        left = session.store.get_artifact(name)
        assert left is not None
        assert left.state == "quarantined"
    weed.start()
    with _open(vault, "gc-kill-1", clock) as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == [name]
        back = reopened.store.get_artifact(name)
        assert back is not None
        assert back.artifact_state is ArtifactState.SEALED
        assert reopened.externalizer.store.object_names() == [name]  # type: ignore[attr-defined]


class _HostDied(BaseException):
    """The GC host's process ends here (nothing after it runs)."""


def test_a_gc_host_dying_after_the_delete_is_finished_from_its_intent(
    vault: dict[str, str],
) -> None:
    clock = _Clock()

    def die() -> None:
        raise _HostDied

    with _open(vault, "gc-die-1", clock) as session:
        artifact = session.externalizer.process(BIG[:400_000], "bash").artifact
        assert artifact is not None
        name = session.externalizer.store.resolve(artifact.handle)
        with pytest.MonkeyPatch.context() as patch:
            _after_call(patch, "delete_object", die)
            with pytest.raises(_HostDied):
                _gc(session)
    with _open(vault, "gc-die-1", clock) as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == [name]
        gone = reopened.store.get_artifact(name)
        assert gone is not None
        assert gone.artifact_state is ArtifactState.DELETED
        topics = [
            n.topic.removeprefix("spillvault:Artifact.")
            for n in reopened.store.notifications()
            if n.topic.startswith("spillvault:Artifact.")
        ]
        # The intent was recorded before the object went: never a delete unrecorded.
        assert topics == ["Stored", "Quarantined", "Deleted"]
        report = _gc(reopened)
        assert all(
            d.status is not ArtifactCleanupStatus.DELETED for d in report.decisions
        )
