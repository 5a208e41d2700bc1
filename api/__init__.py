"""spillvault: spill oversized tool results to verified artifacts, and keep them safe.

The public names of SPEC's Public API are importable from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spillvault.domain.lazy import lazy_exports

if TYPE_CHECKING:
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
    from spillvault.adapters.owners.postgres_owner import PostgresOwner
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

# Each public name's module, imported on first use: `import spillvault` (and so
# every `spillvault` command, hooks run on each tool call among them) loads
# nothing heavy until a name is used.
_HOMES: Final[dict[str, str]] = {
    **dict.fromkeys(
        ["gate_messages"],
        "spillvault.adapters.harness.messages",
    ),
    **dict.fromkeys(
        [
            "ContextPolicy",
            "ContextReport",
            "MicrocompactReport",
            "microcompact",
            "prepare_context",
        ],
        "spillvault.adapters.harness.microcompact",
    ),
    **dict.fromkeys(
        ["InMemoryOwner"],
        "spillvault.adapters.owners.memory_owner",
    ),
    **dict.fromkeys(
        ["ArtifactOwnerError"],
        "spillvault.adapters.owners.owner_common",
    ),
    **dict.fromkeys(
        ["SQLiteOwner"],
        "spillvault.adapters.owners.sqlite_owner",
    ),
    **dict.fromkeys(
        ["ExternalizedToolResult", "GateOutcome"],
        "spillvault.adapters.services.externalizer",
    ),
    **dict.fromkeys(
        [
            "ArtifactRetentionJournal",
            "Session",
            "ToolResultExternalizer",
            "open_session",
        ],
        "spillvault.adapters.session",
    ),
    **dict.fromkeys(
        ["new_session_dir", "new_session_id", "session_root"],
        "spillvault.adapters.storage.session_root",
    ),
    **dict.fromkeys(
        [
            "ArtifactAccessError",
            "ArtifactCleanupPolicy",
            "ArtifactCleanupReason",
            "ArtifactCleanupStatus",
            "ArtifactIntegrityError",
            "ArtifactLeaseJournalError",
            "ArtifactLeasePhase",
            "ArtifactLeaseRecovery",
            "ArtifactLeaseState",
            "ArtifactLeaseTransaction",
            "ArtifactMemoryReference",
            "ArtifactMissingError",
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
            "ArtifactSessionNotFoundError",
            "ArtifactSessionReadOnlyError",
            "ArtifactSource",
            "ArtifactStoreConflict",
            "BASH_MAX_OUTPUT_LENGTH",
            "DEFAULT_ORPHAN_TTL_SECONDS",
            "HEAD_BYTES",
            "IllegalTransition",
            "RETENTION_JOURNAL_NAME",
            "SpillPolicyError",
            "TAIL_BYTES",
            "TOOL_RESULT_THRESHOLD_KB",
            "parse_artifact_source_id",
        ],
        "spillvault.domain",
    ),
    **dict.fromkeys(
        ["ArtifactCleanupDecision", "ArtifactCleanupPlan", "ArtifactCleanupReport"],
        "spillvault.domain.cleanup",
    ),
    **dict.fromkeys(
        ["CommandFacts"],
        "spillvault.domain.command",
    ),
    **dict.fromkeys(
        ["SizeUnit"],
        "spillvault.domain.enums",
    ),
    **dict.fromkeys(
        ["ArtifactHandle", "parse_handle"],
        "spillvault.domain.handles",
    ),
    **dict.fromkeys(
        ["SpillPolicy", "ToolLimit"],
        "spillvault.domain.policy",
    ),
    **dict.fromkeys(
        ["GrepMatch", "GrepResult"],
        "spillvault.domain.reading",
    ),
    "PostgresOwner": "spillvault.adapters.owners.postgres_owner",
}


_exported, __dir__ = lazy_exports(__name__, globals(), _HOMES)


def __getattr__(name: str) -> object:
    """Import a public name's module on first use; `__version__` is read then too."""
    if name == "__version__":
        globals()[name] = _version()
        return globals()[name]
    return _exported(name)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - only when asked

    try:
        return version("spillvault")
    except PackageNotFoundError:  # pragma: no cover - running from an unusual layout
        return "0+unknown"


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
