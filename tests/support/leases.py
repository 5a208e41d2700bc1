"""Small builders for valid claims and transactions."""

from __future__ import annotations

import hashlib

from spillvault.domain.values import (
    ArtifactLeaseTransaction,
    ArtifactRetentionClaim,
    ArtifactSourceId,
)

from support.dates import fixed

T0 = fixed(2026)


def claim_for(
    session_id: str, number: int = 1, data: bytes = b"x"
) -> ArtifactRetentionClaim:
    digest = hashlib.sha256(data).hexdigest()
    source = ArtifactSourceId.for_artifact(
        session_id, f"tool_result_{number:03d}.txt", digest
    )
    return ArtifactRetentionClaim(str(source), digest)


def transaction(session_id: str, tx: str, number: int = 1) -> ArtifactLeaseTransaction:
    return ArtifactLeaseTransaction(tx, claim_for(session_id, number), T0)
