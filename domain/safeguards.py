"""The protections a planted-bug test may switch off, one at a time (issue 7).

Production code only ever uses `Safeguards()`, every protection on: no
environment variable, setting or CLI flag reaches this. A test injects another
value through `open_session(..., safeguards=...)` to show that the crash
fuzzer or the interleaving tests fail without the protection.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Safeguards:
    """Which protections are on; all are, unless a test says otherwise."""

    # S4.6: re-verify the artifact and record PREPARED under the session lock,
    # the lock GC apply takes per candidate.
    publication_lock: bool = True
    # S6.2: GC apply folds the claims again under the lock, per candidate.
    reverify_claims_at_apply: bool = True
    # S5.3: the owner tombstone is durable before ABORTED is recorded.
    tombstone_first: bool = True
