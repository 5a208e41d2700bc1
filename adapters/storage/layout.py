"""Names inside a session directory (S2.1), shared by every adapter."""

from __future__ import annotations

from typing import Final

TOOL_RESULTS_DIR: Final = "tool-results"
QUARANTINE_DIR: Final = ".quarantine"
MARKER_NAME: Final = "session.json"
