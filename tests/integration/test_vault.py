"""One vault, many hosts: objects in SeaweedFS; events, lock and journal in PostgreSQL.

Each "host" here is a separate process with its own `SPILLVAULT_HOME` (its own
local state); they share only the S3 server and the PostgreSQL server. A
handle spilled on one host reads on another through the CLI; leases published
on one protect against GC run from another; GC deletes by `If-Match` after
recording its intent, and recovery settles an intent a crash left.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.session import open_session
from spillvault.adapters.storage.s3_client import s3_client
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import (
    ArtifactIntegrityError,
    ArtifactSessionNotFoundError,
    ObjectStoreConfigError,
)
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from support.seaweedfs import S3Server, s3_environment

if TYPE_CHECKING:
    from pathlib import Path

    from spillvault.adapters.session import Session

_buckets = itertools.count(1)
LOG = "".join(f"test_{n} PASSED\n" for n in range(40_000)) + "FAILED test_last\n"


@pytest.fixture
def vault(
    s3_server: S3Server, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """A fresh bucket and the variables every host of the vault is given."""
    for name, value in s3_environment(s3_server).items():
        monkeypatch.setenv(name, value)
    bucket = f"hosts-{next(_buckets)}"
    s3_client().create_bucket(Bucket=bucket)
    return {
        **s3_environment(s3_server),
        "SPILLVAULT_ARTIFACTS": f"s3://{bucket}/fleet",
        "SPILLVAULT_EVENT_STORE": postgres_dsn,
    }


def _open(vault: dict[str, str], name: str, **kwargs: Any) -> Session:
    return open_session(
        name,
        artifacts=vault["SPILLVAULT_ARTIFACTS"],
        event_store=vault["SPILLVAULT_EVENT_STORE"],
        **kwargs,
    )


def _host(
    vault: dict[str, str], home: Path, *argv: str
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as another host: its own home, the vault's variables only."""
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "SPILLVAULT_HOME": str(home / "sessions"),
        **vault,
    }
    return subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "spillvault"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_handle_spilled_on_one_host_reads_and_greps_on_another(
    vault: dict[str, str], tmp_path: Path
) -> None:
    with _open(vault, "run-1") as session:
        outcome = session.externalizer.process(LOG, "bash")
        assert outcome.reason == "spilled"
        assert outcome.artifact is not None
        handle = outcome.artifact.handle
        assert handle.startswith("run-1/")
    read = _host(vault, tmp_path / "b", "read", handle, "--line", "40001")
    assert read.returncode == 0, read.stderr
    assert "FAILED test_last" in read.stdout
    grep = _host(vault, tmp_path / "b", "grep", handle, "FAILED")
    assert grep.returncode == 0, grep.stderr
    assert "40001" in grep.stdout
    assert not (tmp_path / "b" / "sessions" / "run-1").exists()  # nothing local
    with _open(vault, "run-1", mode="read") as elsewhere:  # the model's own tools
        answer = elsewhere.externalizer.handle_tool_call(
            "grep_artifact", {"handle": handle, "pattern": "FAILED"}
        )
        assert "40001" in answer
        assert "FAILED test_last" in answer


def test_a_grep_over_many_chunks_of_an_object_is_verified(
    vault: dict[str, str],
) -> None:
    """Ranged GETs read ahead on several threads: the same hits, and no forgery."""
    lines = [f"line {n} ok" for n in range(400_000)]  # 5.6 MiB: 6 chunks
    hits = [75_691, 75_692, 150_000, 399_999]
    for n in hits:
        lines[n] = f"line {n} FAILED"
    text = "\n".join(lines) + "\n"
    assert text.index("FAILED") == CHUNK_SIZE - 1  # across chunks 0 and 1
    with _open(vault, "grep-1") as session:
        ext = session.externalizer
        handle = _handle(session, text)
        result = ext.grep_artifact(handle, "FAILED", context=1)
        assert [m.line_number - 1 for m in result.matches] == hits
        assert result.matches[-1].before == ("line 399998 ok",)
        store: Any = ext.store
        store.client.put_object(
            Bucket=store.location.bucket,
            Key=store.key(store.resolve(handle)),
            Body=text.replace("line 390000 ok", "line 390000 OK").encode(),
        )
        with pytest.raises(ArtifactIntegrityError, match="digest mismatch in chunk 5"):
            ext.grep_artifact(handle, "FAILED")


def test_a_vault_needs_a_postgresql_event_store(vault: dict[str, str]) -> None:
    for store in (None, "memory"):
        with pytest.raises(ObjectStoreConfigError, match="PostgreSQL event store"):
            open_session(
                "s", artifacts=vault["SPILLVAULT_ARTIFACTS"], event_store=store
            )


def test_open_and_read_never_create_a_vault_session(vault: dict[str, str]) -> None:
    for mode in ("open", "read"):
        with pytest.raises(ArtifactSessionNotFoundError):
            _open(vault, "never-made", mode=mode)  # type: ignore[arg-type]


def _handle(session: Session, text: str) -> str:
    artifact = session.externalizer.process(text, "bash").artifact
    assert artifact is not None
    return artifact.handle


def _claim(session: Session, handle: str) -> ArtifactRetentionClaim:
    store = session.externalizer.store
    artifact = session.store.get_artifact(store.resolve(handle))
    assert artifact is not None
    reference = store.reference_for(artifact)
    return ArtifactRetentionClaim.from_memory_reference(reference.for_memory())


def test_gc_on_one_host_deletes_only_what_no_lease_protects(
    vault: dict[str, str],
) -> None:
    clock_now = datetime.now(UTC)  # objects age by the server's clock
    with _open(vault, "gc-1") as writer:
        kept = _handle(writer, LOG)
        dropped = _handle(writer, LOG + "x\n")
        writer.journal.publish_reference(_claim(writer, kept), lambda: None)
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=60, dry_run=False)
    later = clock_now + timedelta(days=400)
    with _open(vault, "gc-1") as collector:
        ext = collector.externalizer
        plan = ext.plan_cleanup_from_journal(
            collector.journal, policy=policy, now=later
        )
        report = ext.apply_cleanup_from_journal(plan, collector.journal, now=later)
        deleted = {d.filename for d in report.decisions if d.status.value == "deleted"}
        assert deleted == {ext.store.resolve(dropped)}
        names = ext.store.object_names()  # type: ignore[attr-defined]
        assert names == [ext.store.resolve(kept)]
        gone = collector.store.get_artifact(ext.store.resolve(dropped))
        assert gone is not None
        assert gone.state == "deleted"
        assert collector.journal.verify().records >= 2


def test_an_intent_a_crash_left_is_settled_by_the_next_open(
    vault: dict[str, str],
) -> None:
    with _open(vault, "crash-1") as session:
        handle = _handle(session, LOG)
        name = session.externalizer.store.resolve(handle)
        artifact = session.store.get_artifact(name)
        assert artifact is not None
        with session.lock:
            artifact.quarantine("intent-1", quarantined_at=datetime.now(UTC))
            session.store.save_aggregates(artifact)  # then the "crash"
    with _open(vault, "crash-1") as reopened:
        assert reopened.recovery is not None
        assert reopened.recovery.quarantine_resolved == [name]
        back = reopened.store.get_artifact(name)
        assert back is not None
        assert back.state == "sealed"
        assert "FAILED test_last" in reopened.externalizer.read_artifact(
            handle, 40_000, 1
        )


def test_the_raw_claims_gc_of_a_vault_keeps_what_a_claim_names(
    vault: dict[str, str],
) -> None:
    """Before any lease, the seed's raw-claims GC works on a vault too (S6.4)."""
    later = datetime.now(UTC) + timedelta(days=1)
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=60, dry_run=False)
    with _open(vault, "raw-1") as session:
        kept = _handle(session, LOG)
        dropped = _handle(session, LOG + "y\n")
        claims = [_claim(session, kept)]
        ext = session.externalizer
        plan = ext.plan_cleanup(claims, policy=policy, now=later)
        report = ext.apply_cleanup(plan, claims=claims, now=later)
        deleted = {d.filename for d in report.decisions if d.status.value == "deleted"}
        assert deleted == {ext.store.resolve(dropped)}
        assert ext.store.object_names() == [ext.store.resolve(kept)]  # type: ignore[attr-defined]
