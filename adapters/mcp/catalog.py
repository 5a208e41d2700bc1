"""What the proxy knows of the upstream's tools: names and structured-output rules."""

from __future__ import annotations

import threading
from typing import Any, Final

from spillvault.adapters.mcp.artifact_tools import tool_specs
from spillvault.adapters.mcp.structured import StubRule, stub_rule
from spillvault.domain.notice import GREP_TOOL, READ_TOOL

ADDED_TOOLS: Final = (READ_TOOL, GREP_TOOL)


class ToolClashError(Exception):
    """The upstream lists a tool under a name the proxy adds."""


class ToolCatalog:
    """The upstream's tools as listed, and how each one's result is stubbed."""

    def __init__(self) -> None:
        self._rules: dict[str, StubRule | None] = {}
        self._lock = threading.Lock()

    def knows(self, name: str) -> bool:
        """Tell whether `name` was in a listing the proxy saw."""
        with self._lock:
            return name in self._rules

    def rule_for(self, name: str) -> StubRule | None:
        """Return the stub rule of a listed tool; None also for an unknown one."""
        with self._lock:
            return self._rules.get(name)

    def forget(self) -> None:
        """Forget every tool: the upstream said its list changed."""
        with self._lock:
            self._rules.clear()

    def forwarded(
        self, result: dict[str, Any], *, first_page: bool
    ) -> dict[str, Any] | None:
        """Record a `tools/list` page; return what the client gets, None if unchanged.

        The first page gains the added tools; a schema no stub satisfies is
        dropped from its tool. Raises ToolClashError on a tool named as ours.
        """
        tools = result.get("tools")
        if not isinstance(tools, list):
            return None
        forwarded = []
        changed = first_page
        for tool in tools:
            kept = self._record(tool)
            changed = changed or kept is not tool
            forwarded.append(kept)
        if first_page:
            forwarded.extend(tool_specs(with_list=False))
        return {**result, "tools": forwarded} if changed else None

    def _record(self, tool: object) -> object:
        """Record one listed tool; return it as forwarded."""
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return tool
        name = tool["name"]
        if name in ADDED_TOOLS:
            msg = (
                f"spillvault mcp proxy: the upstream server already has a tool named "
                f"{name!r}, which the proxy adds; it refuses to shadow it (a "
                "spillvault server needs no proxy)"
            )
            raise ToolClashError(msg)
        rule = stub_rule(tool["outputSchema"]) if "outputSchema" in tool else None
        with self._lock:
            self._rules[name] = rule
        if "outputSchema" in tool and rule is None:
            return {key: value for key, value in tool.items() if key != "outputSchema"}
        return tool


__all__ = ["ADDED_TOOLS", "ToolCatalog", "ToolClashError"]
