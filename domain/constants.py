"""Public constants named by SPEC (seed 000's values)."""

from __future__ import annotations

from typing import Final

BASH_MAX_OUTPUT_LENGTH: Final = 30000
TOOL_RESULT_THRESHOLD_KB: Final = 50
HEAD_BYTES: Final = 6144
TAIL_BYTES: Final = 24576
DEFAULT_ORPHAN_TTL_SECONDS: Final = 86400
RETENTION_JOURNAL_NAME: Final = "retention-leases.jsonl"
CHUNK_SIZE: Final = 1024 * 1024
