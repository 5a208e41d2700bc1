"""The shape every client module has, and what an event's answer may use."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

Scope = Literal["user", "project"]
STORED: Final = "[tool result stored as "
"""How every spillvault preview starts: one is never stored again."""
HOOK_TIMEOUT_SECONDS: Final = 30
"""The timeout every installed hook declares: a wrapped command's hook is quick,
an output hook stores at most one result; the clients' defaults are 60-600 s."""
_SESSION_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")
SESSION_ID_CHARS: Final = 40


class HookConfigError(ValueError):
    """A client's configuration file cannot be read or changed safely."""


@dataclass(frozen=True)
class HookContext:
    """What answering an event may use: how to call spillvault, and the gate."""

    spillvault: str
    environ: Mapping[str, str]
    gate: Callable[[str, str, str], str | None]
    """gate(text, tool, session) -> the text the model should see, or None
    when `text` is under the client's limit (nothing to do)."""

    @property
    def shell(self) -> str:
        """The user's shell by name, as the client's own shell tool runs it."""
        return os.path.basename(self.environ.get("SHELL", "bash"))


@dataclass(frozen=True)
class Installation:
    """A configuration file and the text it should hold."""

    path: Path
    text: str


class HookClient:
    """One client: configuration files, entries of ours, answers to events.

    `shell_event` is the event that rewrites a shell command before it runs
    (None: the client cannot), `output_event` the one that replaces a tool's
    output after it ran (None: it cannot). A client whose hooks are files of
    ours (a plugin, an extension) writes them with `install` too: its
    `config_path` is that file.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    events: ClassVar[tuple[str, ...]]
    shell_event: ClassVar[str | None]
    output_event: ClassVar[str | None]
    version_command: ClassVar[tuple[str, ...]]
    session_prefix: ClassVar[str]

    def readiness(self, config: Path, home: Path) -> list[tuple[bool, str]]:
        """Return what else the client needs before it runs the hook (ok, what)."""
        del config, home
        return []

    def caveats(self, version: str | None) -> list[str]:
        """Return what the doctor should say of this client at `version`."""
        del version
        return []

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """Return the file an installation at `scope` edits."""
        raise NotImplementedError

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return the file's text with our entries in (idempotent); refuse a bad one."""
        raise NotImplementedError

    def uninstall(self, text: str) -> str | None:
        """Return the file's text without our entries; None: the file goes (ours)."""
        raise NotImplementedError

    def installed(self, text: str | None) -> bool:
        """Tell whether our entries are in the file's text."""
        raise NotImplementedError

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Return what the hook prints for one event (the client's exact format)."""
        raise NotImplementedError

    def no_op(self, event: str) -> str:
        """Return what the hook prints when it leaves the call as it was."""
        raise NotImplementedError

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return our installed command line per event, as the client runs it."""
        raise NotImplementedError

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Return the stdin JSON the client sends before running shell `command`."""
        raise NotImplementedError

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return the stdin JSON the client sends after a tool returned `output`."""
        raise NotImplementedError

    def rewritten(self, stdout: str) -> str | None:
        """Return the shell command an answer to `shell_event` runs instead, if any."""
        raise NotImplementedError

    def shown(self, stdout: str) -> str | None:
        """Return the text an answer to `output_event` shows the model, if replaced."""
        raise NotImplementedError

    def check(self, event: str, stdout: str) -> list[str]:
        """Name every way `stdout` is not a valid answer to `event`, per the client."""
        raise NotImplementedError

    def session_for(
        self, payload: Mapping[str, Any], environ: Mapping[str, str]
    ) -> str:
        """Return the spillvault session of the agent session an event belongs to."""
        chosen = environ.get("SPILLVAULT_SESSION")
        if chosen:
            return chosen
        agent = ""
        for key in ("session_id", "sessionID", "conversation_id"):
            value = payload.get(key)
            if isinstance(value, str) and value:
                agent = value
                break
        cleaned = _SESSION_UNSAFE.sub("-", agent)[:SESSION_ID_CHARS].strip(".-")
        return f"{self.session_prefix}-{cleaned or 'shared'}"


def json_object(text: str) -> dict[str, Any] | None:
    """Return `text` as one JSON object (a hook's answer), or None."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def specific_output(text: str) -> dict[str, Any] | None:
    """Return an answer's `hookSpecificOutput` object, or None."""
    output = (json_object(text) or {}).get("hookSpecificOutput")
    return output if isinstance(output, dict) else None


def hook_command(spillvault: str, client: str, event: str) -> list[str]:
    """Return the command line a client runs for `event`."""
    return [spillvault, "hook", "run", client, event]


__all__ = [
    "HOOK_TIMEOUT_SECONDS",
    "STORED",
    "HookClient",
    "HookConfigError",
    "HookContext",
    "Installation",
    "Scope",
    "hook_command",
    "json_object",
    "specific_output",
]
