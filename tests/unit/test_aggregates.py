"""Aggregates: stable topics, no bound machine, replay-safe events (S8.1, S8.2)."""

from __future__ import annotations

import copy
import hashlib
from datetime import timedelta

import pytest
from eventsourcing.domain import DomainEvent, Snapshot
from eventsourcing.utils import get_topic

from spillvault.domain.artifact import Artifact, ArtifactContent
from spillvault.domain.constants import CHUNK_SIZE
from spillvault.domain.errors import (
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactRetentionError,
)
from spillvault.domain.lease import Lease
from spillvault.domain.machines import ARTIFACT_MACHINE, LEASE_MACHINE
from spillvault.domain.numbering import ArtifactNumbers
from spillvault.domain.session_view import SessionView
from spillvault.domain.store_identity import StoreIdentity
from spillvault.domain.values import ArtifactRetentionClaim

from support.leases import T0, transaction

TOPICS = {
    "spillvault:Lease", "spillvault:Lease.Event", "spillvault:Lease.Prepared",
    "spillvault:Lease.Committed", "spillvault:Lease.Released",
    "spillvault:Lease.Aborted",
    "spillvault:Artifact", "spillvault:Artifact.Event", "spillvault:Artifact.Stored",
    "spillvault:Artifact.StreamOpened", "spillvault:Artifact.Adopted",
    "spillvault:Artifact.Sealed", "spillvault:Artifact.Quarantined",
    "spillvault:Artifact.Restored", "spillvault:Artifact.Deleted",
    "spillvault:Artifact.MarkedLost", "spillvault:StoreIdentity",
    "spillvault:StoreIdentity.Event", "spillvault:StoreIdentity.Created",
    "spillvault:ArtifactNumbers", "spillvault:ArtifactNumbers.Event",
    "spillvault:ArtifactNumbers.Started", "spillvault:ArtifactNumbers.Reserved",
    "spillvault:ArtifactNumbers.Snapshot",
    "spillvault:SessionView", "spillvault:SessionView.Event",
    "spillvault:SessionView.Started", "spillvault:SessionView.Advanced",
    "spillvault:SessionView.Snapshot",
}  # fmt: skip


def classes_with_topics(root: type) -> set[str]:
    found = {get_topic(root)}
    for value in vars(root).values():
        if isinstance(value, type) and issubclass(value, DomainEvent):
            assert get_topic(value) == value.TOPIC  # type: ignore[attr-defined]
            found.add(get_topic(value))
    return found


def test_every_aggregate_and_event_has_its_stable_topic() -> None:
    roots = (Lease, Artifact, StoreIdentity, ArtifactNumbers, SessionView)
    found = set().union(*(classes_with_topics(c) for c in roots))
    assert found == TOPICS


def test_no_machine_is_bound_to_any_model() -> None:
    for machine in (LEASE_MACHINE.machine, ARTIFACT_MACHINE.machine):
        assert machine.models == []


def content(data: bytes) -> ArtifactContent:
    return ArtifactContent(
        content_sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        line_count=data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0),
        chunk_sha256=(hashlib.sha256(data).hexdigest(),) if data else (),
        chunk_newlines=(data.count(b"\n"),) if data else (),
    )


def test_artifact_content_must_describe_one_byte_string() -> None:
    good = content(b"a\nb")
    assert good.line_count == 2
    with pytest.raises(ArtifactIntegrityError, match="chunks expected"):
        ArtifactContent(good.content_sha256, 5, 1, (), ())
    with pytest.raises(ArtifactIntegrityError, match="line_count 5 vs 1 newlines"):
        ArtifactContent(good.content_sha256, 3, 5, good.chunk_sha256, (1,))
    with pytest.raises(ArtifactIntegrityError, match="size_bytes -1"):
        ArtifactContent(good.content_sha256, -1, 0, (), ())


@pytest.mark.parametrize(
    "bad",
    ["B" * 64, "b" * 63, "b" * 65, "g" * 64, "b" * 63 + "\n", 7],
)
def test_every_chunk_digest_is_64_lower_case_hex_digits(bad: object) -> None:
    digests = ["a" * 64, "b" * 64, "c" * 64]
    for at in range(3):
        chunks = [*digests[:at], bad, *digests[at + 1 :]]
        if isinstance(bad, str) and len(bad) in {63, 65}:
            chunks[(at + 1) % 3] = "d" * (128 - len(bad))  # the total length stays
        with pytest.raises(ArtifactRetentionError, match="chunk digest must be 64"):
            ArtifactContent("e" * 64, 3 * CHUNK_SIZE, 0, tuple(chunks), (0, 0, 0))  # type: ignore[arg-type]


def test_quarantine_remembers_and_restore_returns_to_the_prior_state() -> None:
    artifact = Artifact.adopt("tool_result_007.txt", content(b"x"), adopted_at=T0)
    artifact.quarantine("intent-1", quarantined_at=T0)
    assert (artifact.state, artifact.prior_state) == ("quarantined", "orphan")
    artifact.restore(restored_at=T0)
    assert (artifact.state, artifact.prior_state) == ("orphan", None)
    assert artifact.number == 7
    assert artifact.source_id("s") == (
        "artifact:s:tool_result_007.txt:" + hashlib.sha256(b"x").hexdigest()[:12]
    )


def test_an_open_stream_has_no_source_id_until_sealed() -> None:
    artifact = Artifact.open_stream(
        "tool_result_001.txt", source_tool="bash", tool_use_id="tu-1", opened_at=T0
    )
    assert artifact.source_id("s") is None
    artifact.seal_partial(content(b"half"), summary="half", sealed_at=T0)
    assert artifact.state == "partial"
    with pytest.raises(ArtifactLeaseJournalError, match="cannot seal from 'partial'"):
        artifact.seal(content(b"half"), summary="half", sealed_at=T0)


def test_artifacts_refuse_names_that_are_not_ours() -> None:
    with pytest.raises(ValueError, match="not an artifact filename"):
        Artifact.adopt("../etc/passwd", content(b"x"), adopted_at=T0)


def test_lease_protection_follows_phase_and_retain_until() -> None:
    tx = transaction("s", "tx")
    claim = ArtifactRetentionClaim(
        tx.claim.source_id,
        tx.claim.content_sha256,
        retain_until=T0 + timedelta(hours=1),
    )
    lease = Lease.prepare(type(tx)("tx", claim, T0))
    later = T0 + timedelta(days=30)
    assert lease.protects(later)  # prepared: no expiry (S4.7)
    lease.commit(T0)
    assert lease.protects(T0 + timedelta(minutes=59))
    assert not lease.protects(T0 + timedelta(hours=1))
    lease.release(T0)
    assert not lease.protects(T0)


def test_aggregates_snapshot_deepcopy_and_replay_cleanly() -> None:
    lease = Lease.prepare(transaction("s", "tx"))
    lease.commit(T0)
    events = lease.collect_events()
    copied = copy.deepcopy(lease)
    assert vars(copied) == vars(lease)
    snapshot = Snapshot.take(lease)
    restored = snapshot.mutate(None)
    assert (restored.state, restored.version) == ("committed", 2)
    replayed = None
    for event in events:
        replayed = event.mutate(replayed)
    assert replayed is not None
    assert (replayed.state, replayed.phase_history) == (
        "committed",
        ["prepared", "committed"],
    )
