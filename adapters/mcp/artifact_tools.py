"""The artifact tools an MCP client calls: read, grep and list, across sessions.

`read_artifact` and `grep_artifact` are the model tools of S7.2 (the same
definitions, argument names, caps and continuation hints); `list_artifacts`
pages through the artifacts of the sessions in reach, newest first. A handle
names its own session (`<session-id>/<number>`), so one server reads the
handles of every session under the root; with a scope (`--session`), only
that session's. Absolute paths are refused: nothing outside the sessions is
read through a client's argument.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from spillvault.adapters.harness.capping import cap_lines
from spillvault.adapters.harness.model_tools import handle_tool_call, tool_definitions
from spillvault.adapters.session import open_session, vault_from_environment
from spillvault.adapters.storage.object_store import vault_session_ids
from spillvault.adapters.storage.s3_client import s3_client
from spillvault.adapters.storage.session_root import (
    session_id_of,
    session_root,
    sessions_under,
)
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactSessionNotFoundError,
    ArtifactSessionReadOnlyError,
)
from spillvault.domain.notice import GREP_TOOL, READ_TOOL

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from spillvault.adapters.services.externalizer import SessionExternalizer
    from spillvault.adapters.session import Session
    from spillvault.domain.policy import SpillPolicy

LIST_TOOL: Final = "list_artifacts"
DEFAULT_LIST_LIMIT: Final = 50
MAX_LIST_LIMIT: Final = 500
_LIST_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "session": {
            "type": "string",
            "description": "Only this session's artifacts (a session id).",
        },
        "start": {
            "type": "integer",
            "minimum": 1,
            "default": 1,
            "description": "First entry to show, 1-based, newest first.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LIST_LIMIT,
            "default": DEFAULT_LIST_LIMIT,
        },
    },
    "additionalProperties": False,
}
_LIST_DESCRIPTION: Final = (
    "List stored tool results, newest first: handle, size, lines, tool, "
    "creation time and a one-line summary of each."
)


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool call returns: text for the model, and whether it failed."""

    text: str
    is_error: bool = False


def tool_specs(*, with_list: bool) -> list[dict[str, Any]]:
    """Return the tools as MCP `Tool` objects in wire form (camelCase keys)."""
    specs = [
        {
            "name": tool["name"],
            "description": tool["description"],
            "inputSchema": tool["input_schema"],
            "annotations": {"readOnlyHint": True, "idempotentHint": True},
        }
        for tool in tool_definitions("anthropic")
    ]
    if with_list:
        specs.append(
            {
                "name": LIST_TOOL,
                "description": _LIST_DESCRIPTION,
                "inputSchema": _LIST_SCHEMA,
                "annotations": {"readOnlyHint": True, "idempotentHint": True},
            }
        )
    return specs


class OwnSession:
    """The session a proxy writes to, created on its first spill, not before."""

    def __init__(self, path: str, policy: SpillPolicy) -> None:
        self.path = path
        self.session_id = os.path.basename(path)
        self._policy = policy
        self._session: Session | None = None

    @property
    def is_open(self) -> bool:
        """Tell whether the session exists yet (something was spilled)."""
        return self._session is not None

    def get(self) -> Session:
        """Return the session, creating it on first use."""
        if self._session is None:
            self._session = open_session(
                self.path, policy=self._policy, **vault_from_environment()
            )
        return self._session

    def close(self) -> None:
        """Close the session if it was ever opened."""
        if self._session is not None:
            self._session.close()
            self._session = None


class ArtifactTools:
    """Answers read, grep and list calls; sessions opened on demand and kept."""

    def __init__(
        self,
        policy: SpillPolicy,
        *,
        scope: str | None = None,
        own: OwnSession | None = None,
        root: Callable[[], str] = session_root,
    ) -> None:
        self.policy = policy
        self.scope = scope
        self.own = own
        self.lock = threading.RLock()
        self._root = root
        self._open: dict[str, Session] = {}

    @property
    def names(self) -> frozenset[str]:
        """The tool names this object answers."""
        return frozenset({READ_TOOL, GREP_TOOL, LIST_TOOL})

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolAnswer:
        """Run one tool call; every failure is an answer naming what to change."""
        args = dict(arguments or {})
        try:
            with self.lock:
                if name == LIST_TOOL:
                    return ToolAnswer(self._list(args))
                ext = self._externalizer_for(args.get("handle"))
                text = handle_tool_call(ext, name, args)
        except (ArtifactAccessError, ValueError) as error:
            return ToolAnswer(f"error: {error}", is_error=True)
        return ToolAnswer(text, is_error=text.startswith("error: "))

    def close(self) -> None:
        """Close every session this object opened (not the proxy's own)."""
        with self.lock:
            for session in self._open.values():
                session.close()
            self._open.clear()

    def _externalizer_for(self, handle: object) -> SessionExternalizer:
        """Return the externalizer of the session `handle` names."""
        if not isinstance(handle, str) or not handle:
            msg = "handle is required and must be a non-empty string"
            raise ArtifactAccessError(msg)
        wanted = session_id_of(handle)
        if wanted is None:
            msg = (
                f"not an artifact handle: {handle[:300]!r} (a handle is "
                "<session-id>/<number>, as the notice shows it)"
            )
            raise ArtifactAccessError(msg)
        own = self.own
        if own is not None and own.session_id == wanted and own.is_open:
            return own.get().externalizer
        return self._session(wanted).externalizer

    def _session(self, session_id: str) -> Session:
        """Return the open session `session_id`, opening it within reach."""
        session = self._open.get(session_id)
        if session is not None:
            return session
        path = self._path_of(session_id)
        try:
            session = open_session(
                path, policy=self.policy, mode="open", **vault_from_environment()
            )
        except ArtifactSessionReadOnlyError:
            session = open_session(
                path, policy=self.policy, mode="read", **vault_from_environment()
            )
        self._open[session_id] = session
        return session

    def _path_of(self, session_id: str) -> str:
        """Return the directory of `session_id` within this server's reach."""
        if self.scope is not None:
            if os.path.basename(self.scope) != session_id:
                msg = (
                    f"session {session_id!r} is out of reach: this server serves "
                    f"only {os.path.basename(self.scope)!r}"
                )
                raise ArtifactSessionNotFoundError(msg)
            return self.scope
        path = os.path.join(self._root(), session_id)
        if not os.path.isdir(path) and not vault_from_environment():
            msg = f"no session {session_id!r} under {self._root()}"
            raise ArtifactSessionNotFoundError(msg)
        return path

    def _session_ids(self, only: object) -> list[str]:
        """Return the session ids to list, newest first."""
        if only is not None:
            if not isinstance(only, str) or not only:
                msg = "session must be a non-empty string"
                raise ValueError(msg)
            self._path_of(only)
            return [only]
        if self.scope is not None:
            return [os.path.basename(self.scope)]
        vault = vault_from_environment()
        if vault:
            ids = vault_session_ids(vault["artifacts"], s3_client())
        else:
            ids = [os.path.basename(path) for path in sessions_under(self._root())]
        if self.own is not None and self.own.is_open and self.own.session_id not in ids:
            ids.append(self.own.session_id)
        return ids[::-1]

    def _list(self, args: dict[str, Any]) -> str:
        """Return one page of `list_artifacts`, newest first, capped."""
        unknown = sorted(set(args) - {"session", "start", "limit"})
        if unknown:
            msg = (
                f"unknown argument(s) {', '.join(unknown)}; "
                "allowed: limit, session, start"
            )
            raise ValueError(msg)
        start = _integer(args, "start", 1, 1, 2**62)
        limit = _integer(args, "limit", DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT)
        rows: list[str] = []
        for session_id in self._session_ids(args.get("session")):
            if self.own is not None and self.own.session_id == session_id:
                ext = self.own.get().externalizer if self.own.is_open else None
            else:
                ext = self._session(session_id).externalizer
            if ext is not None:
                rows.extend(reversed(_rows(ext)))
        if not rows:
            return "no stored tool results"
        if start > len(rows):
            msg = f"start {start} is past the end: there are {len(rows)} entries"
            raise ValueError(msg)
        page = rows[start - 1 : start - 1 + limit]
        budget = self.policy.limit_for(READ_TOOL).budget
        capped = cap_lines(page, first_line=start, budget=budget, max_line=2000)
        last = start + capped.shown - 1
        text = f"[entries {start}-{last} of {len(rows)}, newest first]\n{capped.text}"
        if last < len(rows):
            text += f"\n[more: {LIST_TOOL}(start={last + 1}, limit={limit})]"
        return text


def _rows(ext: SessionExternalizer) -> list[str]:
    """Return one line per artifact of a session, oldest first."""
    rows = []
    for artifact in ext.artifacts():
        content = artifact.stored_content
        size = "writing" if content is None else f"{content.size_bytes} bytes"
        lines = "" if content is None else f", {content.line_count} lines"
        handle = ext.store.handle_for(artifact.filename)
        # The summary is the output's first line: masked like every read (S3.6).
        summary = artifact.summary
        if ext.policy.redact_secrets and summary is not None:
            summary = ext.redact_summary(summary)
        rows.append(
            f"{handle}  {size}{lines}  tool={artifact.source_tool}  "
            f"{artifact.created_at}  {summary}"
        )
    return rows


def _integer(
    args: Mapping[str, Any], key: str, default: int, low: int, high: int
) -> int:
    value = args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{key} must be an integer, not {value!r}"
        raise ValueError(msg)  # noqa: TRY004 - an answer for the model, not a type bug
    if not low <= value <= high:
        msg = f"{key} must be between {low} and {high}, not {value}"
        raise ValueError(msg)
    return value


__all__ = [
    "LIST_TOOL",
    "ArtifactTools",
    "OwnSession",
    "ToolAnswer",
    "tool_specs",
]
