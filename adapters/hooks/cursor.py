"""Cursor: `preToolUse` wraps Shell; `postToolUse` gates what MCP tools returned.

Facts relied on (cursor.com/docs/hooks, scraped spring 2026 or later;
cursor.com/docs/reference/third-party-hooks; a static read of the Cursor
CLI bundle 2026.09.18-9a7762b, "subcortex" adapter spec, 2026-09-21):

- hooks live in `~/.cursor/hooks.json` (user) and `.cursor/hooks.json`
  (project, run only in a trusted workspace) as `{"version": 1, "hooks":
  {"preToolUse": [{command, matcher, timeout}]}}`: flat entries, timeout in
  seconds, matchers unanchored regular expressions on the tool type
  (`Shell`, `Read`, …, `MCP:<tool>`); the CLI rejects the whole file without
  a positive integer `version`, so install adds `version: 1` when missing
  and refuses a file whose `version` is something else;
- `preToolUse` gets `tool_name: "Shell"` and `tool_input: {command, cwd}`
  (the docs show `working_directory`); `updated_input` replaces it (merge or
  replace is unverified: every field is copied). The answer carries no
  `permission`: Cursor applies `updated_input` without one (bundle read,
  not run), and "allow" would skip Cursor's own approval;
- `preToolUse` is a permission hook: empty stdout or anything but one JSON
  object blocks the tool, so every answer, the no-op too, is one object;
- `postToolUse` gets `tool_output` as a JSON string and may replace only an
  MCP tool's output, with `updated_mcp_tool_output` (a string or
  `{content: [{type: "text", text}]}`); Shell, Read and Grep output cannot be
  replaced, so Shell is wrapped before it runs. An MCP error result is left
  as it is: the replacement could not keep its `isError`;
- Cursor also runs Claude Code's hooks (third-party configs); the
  claude-code hook does nothing inside Cursor, so only this one acts;
- `cursor-agent --version` prints the CLI build, `2026.09.18-9a7762b`;
  CLI builds before 2026.05.20 fire only some events.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from typing import TYPE_CHECKING, Any, ClassVar, Final

from spillvault.adapters.hooks.client import (
    HOOK_TIMEOUT_SECONDS,
    HookClient,
    HookConfigError,
    Scope,
    hook_command,
    json_object,
)
from spillvault.adapters.hooks.json_settings import (
    arranged,
    dump_settings,
    is_ours,
    load_settings,
)
from spillvault.domain.shell_wrap import wrap_shell_command

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from spillvault.adapters.hooks.client import HookContext

NAME: Final = "cursor"
WHAT: Final = "Cursor hooks.json"
BEFORE: Final = "preToolUse"
AFTER: Final = "postToolUse"
MATCHERS: Final = {BEFORE: "Shell", AFTER: "^MCP:"}
NO_OP: Final = "{}"
"""No opinion. Never empty: Cursor blocks a tool whose permission hook prints none."""
POSIX_SHELLS: Final = frozenset({"bash", "zsh", "sh"})
BACKGROUND_FIELDS: Final = ("is_background", "run_in_background", "background")
BEFORE_FIELDS: Final = frozenset(
    {"permission", "user_message", "agent_message", "updated_input"}
)
AFTER_FIELDS: Final = frozenset({"additional_context", "updated_mcp_tool_output"})
MIN_HOOKS_BUILD: Final = (2026, 5, 20)
_CLI_BUILD: Final = re.compile(r"(\d{4})\.(\d{2})\.(\d{2})-[0-9a-f]+")


class Cursor(HookClient):
    """Cursor's hooks.json hooks (the editor's agent and the `cursor-agent` CLI)."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "Cursor"
    events: ClassVar[tuple[str, ...]] = (BEFORE, AFTER)
    shell_event: ClassVar[str | None] = BEFORE
    output_event: ClassVar[str | None] = AFTER
    version_command: ClassVar[tuple[str, ...]] = ("cursor-agent", "--version")
    session_prefix: ClassVar[str] = "cursor"

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """User: ~/.cursor/hooks.json; project: .cursor/hooks.json."""
        base = home if scope == "user" else project
        return base / ".cursor" / "hooks.json"

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return hooks.json with our two entries where ours stood, else last."""
        data = load_settings(text, WHAT)
        version = data.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            msg = (
                f"{WHAT}: version {version!r} is not a positive integer, and Cursor "
                "skips the whole file; fix it first; left untouched"
            )
            raise HookConfigError(msg)
        entries = {event: self._entry(command[0], event) for event in self.events}
        wanted = {"version": version, **arranged(data, entries, _not_ours)}
        if text is not None and wanted == data:
            return text  # already in: the file stays as it is
        return dump_settings(wanted)

    def uninstall(self, text: str) -> str:
        """Return hooks.json without our entries (an added `version` stays)."""
        return dump_settings(arranged(load_settings(text, WHAT), {}, _not_ours))

    def installed(self, text: str | None) -> bool:
        """Tell whether an entry of ours is in hooks.json."""
        return bool(self.hook_commands(text or ""))

    def caveats(self, version: str | None) -> list[str]:
        """Say what Cursor lets a hook change, and what it still decides itself."""
        notes = [
            (
                "Cursor replaces only MCP tool outputs: Shell is wrapped before it "
                "runs, and Read, Grep and the other built-in tools are not gated"
            ),
            (
                "the hook answers with no permission, so Cursor's own approval and "
                "allowlist judge the rewritten command as they would the original "
                "(whether an allowlist entry still matches after the rewrite is "
                "unverified; the doctor cannot see Cursor apply updated_input: "
                "check that a long command's output in Cursor names a handle)"
            ),
            (
                "Cursor also runs Claude Code's hooks (third-party configs): with "
                "both installed, the claude-code hook stays silent inside Cursor "
                "and only this one acts"
            ),
            "project hooks (.cursor/hooks.json) run only in a trusted workspace",
        ]
        build = _build_date(version)
        if build is not None and build < MIN_HOOKS_BUILD:
            old = (
                f"{version}: Cursor CLI builds before 2026.05.20 fire only some hook "
                "events; preToolUse and postToolUse may not run"
            )
            notes.insert(0, old)
        return notes

    def _entry(self, spillvault: str, event: str) -> dict[str, Any]:
        return {
            "command": shlex.join(hook_command(spillvault, NAME, event)),
            "matcher": MATCHERS[event],
            "timeout": HOOK_TIMEOUT_SECONDS,
        }

    # answering events -----------------------------------------------------------

    def no_op(self, event: str) -> str:  # noqa: ARG002 - the same for every event
        """Return `{}`: no opinion, the call goes on as it was."""
        return NO_OP

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Wrap a Shell command before it runs, or gate an MCP tool's output after."""
        if event == BEFORE:
            return self._before(payload, context)
        if event == AFTER:
            return self._after(payload, context)
        return NO_OP

    def _before(self, payload: Mapping[str, Any], context: HookContext) -> str:
        tool_input = payload.get("tool_input")
        if payload.get("tool_name") != "Shell" or not isinstance(tool_input, dict):
            return NO_OP
        command = tool_input.get("command")
        shell = tool_input.get("shell")
        if (
            not isinstance(command, str)
            or any(tool_input.get(field) for field in BACKGROUND_FIELDS)
            or (isinstance(shell, str) and os.path.basename(shell) not in POSIX_SHELLS)
        ):
            return NO_OP
        wrap = wrap_shell_command(
            command,
            spillvault=context.spillvault,
            session=self.session_for(payload, context.environ),
            shell=context.shell,
        )
        if wrap.command is None:
            return NO_OP
        # No `permission`: Cursor's own approval runs on the command as ever.
        return json.dumps({"updated_input": {**tool_input, "command": wrap.command}})

    def _after(self, payload: Mapping[str, Any], context: HookContext) -> str:
        tool = payload.get("tool_name")
        if not isinstance(tool, str) or not tool.startswith("MCP:"):
            return NO_OP
        blocks = _mcp_blocks(payload.get("tool_output"))
        if blocks is None:
            return NO_OP
        texts = [block["text"] for block in blocks if block.get("type") == "text"]
        if not texts:
            return NO_OP
        session = self.session_for(payload, context.environ)
        shown = context.gate("\n".join(texts), tool, session)
        if shown is None:
            return NO_OP
        others = [block for block in blocks if block.get("type") != "text"]
        content = [{"type": "text", "text": shown}, *others]
        return json.dumps({"updated_mcp_tool_output": {"content": content}})

    # the doctor -------------------------------------------------------------------

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return our entry's command per event."""
        found: dict[str, str] = {}
        for event, entries in load_settings(text, WHAT).get("hooks", {}).items():
            for entry in entries:
                if _is_ours(entry):
                    found[event] = entry["command"]
        return found

    def _canary(self, event: str, cwd: str, **fields: Any) -> dict[str, Any]:
        return {
            "conversation_id": "spillvault-doctor",
            "generation_id": "spillvault-doctor-1",
            "model": "composer-2.5",
            "session_id": "spillvault-doctor",
            "hook_event_name": event,
            "cursor_version": "2026.09.18-9a7762b",
            "workspace_roots": [cwd],
            "user_email": None,
            "transcript_path": None,
            "cwd": cwd,
            "tool_use_id": "call_spillvault_doctor",
            **fields,
        }

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Cursor sends before a Shell call of `command`."""
        tool_input = {"command": command, "cwd": cwd}
        return self._canary(BEFORE, cwd, tool_name="Shell", tool_input=tool_input)

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Cursor sends after an MCP tool returned `output`."""
        result = {"content": [{"type": "text", "text": output}], "isError": False}
        return self._canary(
            AFTER, cwd, tool_name="MCP:read_log", tool_input={"path": "doctor.log"},
            tool_output=json.dumps(result), duration=12,
        )  # fmt: skip

    def rewritten(self, stdout: str) -> str | None:
        """Return `updated_input.command` of a preToolUse answer."""
        data = json_object(stdout)
        updated = data.get("updated_input") if data else None
        command = updated.get("command") if isinstance(updated, dict) else None
        return command if isinstance(command, str) else None

    def shown(self, stdout: str) -> str | None:
        """Return the text a postToolUse answer shows the model instead."""
        data = json_object(stdout)
        replaced = data.get("updated_mcp_tool_output") if data else None
        if isinstance(replaced, str):
            return replaced
        blocks = _mcp_blocks(replaced)
        texts = [b["text"] for b in blocks or [] if b.get("type") == "text"]
        return "\n".join(texts) if texts else None

    def check(self, event: str, stdout: str) -> list[str]:
        """Name what makes `stdout` an answer Cursor would block or not apply."""
        data = json_object(stdout)
        if data is None:
            return ["stdout is not one JSON object: Cursor blocks the tool"]
        known = BEFORE_FIELDS if event == BEFORE else AFTER_FIELDS
        problems = [
            f"{key!r} is not a {event} field" for key in sorted(set(data) - known)
        ]
        if event == BEFORE:
            updated = data.get("updated_input")
            if updated is not None and not (
                isinstance(updated, dict) and isinstance(updated.get("command"), str)
            ):
                problems.append("updated_input is not a Shell input with a command")
            if data.get("permission") not in {None, "allow", "deny", "ask"}:
                problems.append("permission is not allow, deny or ask")
        elif "updated_mcp_tool_output" in data:
            replaced = data["updated_mcp_tool_output"]
            if not isinstance(replaced, str) and _mcp_blocks(replaced) is None:
                problems.append("updated_mcp_tool_output is not text or MCP content")
        return problems


def _is_ours(entry: object) -> bool:
    return isinstance(entry, dict) and is_ours(entry.get("command"), NAME)


def _not_ours(entry: object) -> object | None:
    """Return an entry that is not ours; None for ours."""
    return None if _is_ours(entry) else entry


def _mcp_blocks(output: object) -> list[dict[str, Any]] | None:
    """Return an MCP result's content blocks; None: not a result to replace.

    `tool_output` arrives as a JSON string of the result; a string that is
    not JSON, or a JSON string, is the text itself. An error result, or a
    block with no text where a text block should have one, is left alone.
    """
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            return [{"type": "text", "text": output}]
        if isinstance(output, str):
            return [{"type": "text", "text": output}]
    if isinstance(output, dict):
        if output.get("isError"):
            return None
        output = output.get("content")
    if not isinstance(output, list) or not all(isinstance(b, dict) for b in output):
        return None
    if any(
        b.get("type") == "text" and not isinstance(b.get("text"), str) for b in output
    ):
        return None
    return output


def _build_date(version: str | None) -> tuple[int, int, int] | None:
    """Parse a CLI build `2026.09.18-9a7762b` into (2026, 9, 18); None: not one."""
    match = _CLI_BUILD.search(version or "")
    if match is None:
        return None
    year, month, day = (int(part) for part in match.groups())
    return year, month, day


CLIENT: Final = Cursor()

__all__ = ["CLIENT", "Cursor"]
