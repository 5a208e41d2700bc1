"""The size bounds of what an MCP client receives from spillvault."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spillvault.domain.errors import SpillPolicyError

if TYPE_CHECKING:
    from spillvault.domain.policy import SpillPolicy

DEFAULT_RESULT_CHARS: Final = 30_000
"""A whole tool result, notice and structured stub included, in characters.

Claude Code spills an MCP result above about 40,000 characters and warns from
10,000 estimated tokens (about 40,000 characters at its four per token); Codex
and Gemini CLI cut at 10 KB to 40 KB. 30,000 characters passes all of them.
"""
STRUCTURED_ROOM: Final = 1_000
"""What a result keeps free for a structured-content stub or pointer line."""
MIN_RESULT_CHARS: Final = 4_000
"""The smallest `--limit`: room for the worst-case notice, the stub and a preview."""
MAX_RESULT_CHARS: Final = 1_000_000_000


def mcp_policy(result_chars: int = DEFAULT_RESULT_CHARS) -> SpillPolicy:
    """Return the policy of MCP results: text over the bound spills, no tool exempt.

    The text of a result may use all but STRUCTURED_ROOM of the bound; a read
    or grep answer uses the same budget, so its answer fits the same clients.
    """
    if not MIN_RESULT_CHARS <= result_chars <= MAX_RESULT_CHARS:
        msg = (
            f"the MCP result limit must be from {MIN_RESULT_CHARS} to "
            f"{MAX_RESULT_CHARS} characters, not {result_chars}"
        )
        raise SpillPolicyError(msg)
    # The command line reads the bounds above at every start; the policy module
    # (and its key-line engine) loads only when a policy is built.
    from spillvault.domain.enums import SizeUnit  # noqa: PLC0415
    from spillvault.domain.policy import SpillPolicy, ToolLimit  # noqa: PLC0415

    text = ToolLimit(result_chars - STRUCTURED_ROOM, SizeUnit.CHARS)
    # No upstream tool is exempt: a server's `read_file` is no spillvault read.
    return SpillPolicy(default_limit=text, tool_limits={}, exempt_tools=frozenset())


__all__ = [
    "DEFAULT_RESULT_CHARS",
    "MAX_RESULT_CHARS",
    "MIN_RESULT_CHARS",
    "STRUCTURED_ROOM",
    "mcp_policy",
]
