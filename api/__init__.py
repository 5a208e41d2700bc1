"""spillvault: spill oversized tool results to verified artifacts, and keep them safe.

The public names of SPEC's Public API are importable from here.
"""

from importlib.metadata import PackageNotFoundError, version

from spillvault.adapters.harness.messages import gate_messages
from spillvault.adapters.harness.microcompact import (
    ContextPolicy,
    ContextReport,
    MicrocompactReport,
    microcompact,
    prepare_context,
)
from spillvault.adapters.owners.memory_owner import InMemoryOwner
from spillvault.adapters.owners.owner_common import ArtifactOwnerError
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.services.externalizer import (
    ExternalizedToolResult,
    GateOutcome,
)
from spillvault.adapters.session import (
    ArtifactRetentionJournal,
    Session,
    ToolResultExternalizer,
    open_session,
)
from spillvault.adapters.storage.session_root import (
    new_session_dir,
    new_session_id,
    session_root,
)
from spillvault.domain import (
    BASH_MAX_OUTPUT_LENGTH,
    DEFAULT_ORPHAN_TTL_SECONDS,
    HEAD_BYTES,
    RETENTION_JOURNAL_NAME,
    TAIL_BYTES,
    TOOL_RESULT_THRESHOLD_KB,
    ArtifactAccessError,
    ArtifactCleanupPolicy,
    ArtifactCleanupReason,
    ArtifactCleanupStatus,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactLeasePhase,
    ArtifactLeaseRecovery,
    ArtifactLeaseState,
    ArtifactLeaseTransaction,
    ArtifactMemoryReference,
    ArtifactMissingError,
    ArtifactOwnerGenerationChanged,
    ArtifactPublicationRejected,
    ArtifactReconciliationReason,
    ArtifactReconciliationReport,
    ArtifactReconciliationStatus,
    ArtifactReference,
    ArtifactReferenceObservation,
    ArtifactReferenceOwner,
    ArtifactReferencePresence,
    ArtifactRetentionClaim,
    ArtifactRetentionError,
    ArtifactSessionNotFoundError,
    ArtifactSessionReadOnlyError,
    ArtifactSource,
    ArtifactStoreConflict,
    IllegalTransition,
    SpillPolicyError,
    parse_artifact_source_id,
)
from spillvault.domain.cleanup import (
    ArtifactCleanupDecision,
    ArtifactCleanupPlan,
    ArtifactCleanupReport,
)
from spillvault.domain.command import CommandFacts
from spillvault.domain.enums import SizeUnit
from spillvault.domain.handles import ArtifactHandle, parse_handle
from spillvault.domain.policy import SpillPolicy, ToolLimit
from spillvault.domain.reading import GrepMatch, GrepResult


def __getattr__(name: str) -> object:
    """Import `PostgresOwner` on first use: it needs the `postgres` extra."""
    if name == "PostgresOwner":
        from spillvault.adapters.owners.postgres_owner import PostgresOwner  # noqa: PLC0415

        return PostgresOwner
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


try:
    __version__ = version("spillvault")
except PackageNotFoundError:  # pragma: no cover - running from an unusual layout
    __version__ = "0+unknown"

__all__ = [
    "BASH_MAX_OUTPUT_LENGTH",
    "DEFAULT_ORPHAN_TTL_SECONDS",
    "HEAD_BYTES",
    "RETENTION_JOURNAL_NAME",
    "TAIL_BYTES",
    "TOOL_RESULT_THRESHOLD_KB",
    "ArtifactAccessError",
    "ArtifactCleanupDecision",
    "ArtifactCleanupPlan",
    "ArtifactCleanupPolicy",
    "ArtifactCleanupReason",
    "ArtifactCleanupReport",
    "ArtifactCleanupStatus",
    "ArtifactHandle",
    "ArtifactIntegrityError",
    "ArtifactLeaseJournalError",
    "ArtifactLeasePhase",
    "ArtifactLeaseRecovery",
    "ArtifactLeaseState",
    "ArtifactLeaseTransaction",
    "ArtifactMemoryReference",
    "ArtifactMissingError",
    "ArtifactOwnerError",
    "ArtifactOwnerGenerationChanged",
    "ArtifactPublicationRejected",
    "ArtifactReconciliationReason",
    "ArtifactReconciliationReport",
    "ArtifactReconciliationStatus",
    "ArtifactReference",
    "ArtifactReferenceObservation",
    "ArtifactReferenceOwner",
    "ArtifactReferencePresence",
    "ArtifactRetentionClaim",
    "ArtifactRetentionError",
    "ArtifactRetentionJournal",
    "ArtifactSessionNotFoundError",
    "ArtifactSessionReadOnlyError",
    "ArtifactSource",
    "ArtifactStoreConflict",
    "CommandFacts",
    "ContextPolicy",
    "ContextReport",
    "ExternalizedToolResult",
    "GateOutcome",
    "GrepMatch",
    "GrepResult",
    "IllegalTransition",
    "InMemoryOwner",
    "MicrocompactReport",
    "PostgresOwner",
    "SQLiteOwner",
    "Session",
    "SizeUnit",
    "SpillPolicy",
    "SpillPolicyError",
    "ToolLimit",
    "ToolResultExternalizer",
    "__version__",
    "gate_messages",
    "microcompact",
    "new_session_dir",
    "new_session_id",
    "open_session",
    "parse_artifact_source_id",
    "parse_handle",
    "prepare_context",
    "session_root",
]
