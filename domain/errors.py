"""The error classes of SPEC's Errors table; library exceptions are wrapped."""

from __future__ import annotations


class SpillPolicyError(ValueError):
    """Invalid spill configuration (S1.3)."""


class ArtifactAccessError(ValueError):
    """A handle or path outside the session, a symlink, a NUL byte (S3.2)."""


class ArtifactSessionNotFoundError(ArtifactAccessError):
    """No session where one must exist: no directory or no `session.json` (S4.4)."""


class ArtifactIntegrityError(RuntimeError):
    """Digest or size mismatch on read, or a file that changed while hashing."""


class ArtifactRetentionError(ValueError):
    """Invalid claim, source id, timestamp or observation; plan misuse (S4.2, S6.4)."""


class ObjectStoreError(OSError):
    """An object store refused, failed or did not answer in time (no half writes)."""


class ObjectStoreConfigError(ValueError):
    """An unusable object-store address or setting (`--artifacts`, AWS variables)."""


class ArtifactLeaseJournalError(RuntimeError):
    """Journal or store damaged or mismatched; illegal transition; reused id."""


class ArtifactMissingError(ArtifactRetentionError, ArtifactLeaseJournalError):
    """A publication refused: GC deleted the artifact, or its file is gone (S4.6).

    The seed raises a retention error ("missing artifact"); the contract files
    refused publications under the journal error. It is both.
    """


class IllegalTransition(ArtifactLeaseJournalError):
    """A spec has no edge for this trigger from this state (S4.10, S8.2)."""


class ArtifactStoreConflict(ArtifactLeaseJournalError):
    """Another writer changed the same aggregate first; reload and decide again."""


class ArtifactSessionReadOnlyError(ArtifactLeaseJournalError):
    """A write refused: the session is read-only (read-only filesystem or view)."""


class ArtifactPublicationRejected(RuntimeError):
    """An owner refused a publication: nothing written, nothing in flight (S4.6)."""


class ArtifactOwnerGenerationChanged(RuntimeError):
    """`seal_absent` found the owner's generation moved or the reference present."""
