"""Gate one tool output for a hook: stored whole, a bounded preview shown."""

from __future__ import annotations

from spillvault.adapters.mcp.limits import mcp_policy
from spillvault.adapters.session import open_session, vault_from_environment
from spillvault.adapters.storage.session_root import session_dir_for


def gate_output(text: str, tool: str, session: str, limit: int) -> str | None:
    """Return the preview of `text` stored in `session`; None to keep the original.

    The bound is the MCP one: a result a client shows whole. A store that
    fails keeps the original (S1.2.5), as the gate always does.
    """
    with open_session(
        session_dir_for(session), policy=mcp_policy(limit), **vault_from_environment()
    ) as opened:
        outcome = opened.externalizer.process(text, tool)
    return None if outcome.artifact is None else str(outcome.content)


__all__ = ["gate_output"]
