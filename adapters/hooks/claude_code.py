"""Claude Code: `PreToolUse` wraps Bash; `PostToolUse` gates what the tools returned.

Facts relied on (Claude Code docs, hooks page and CHANGELOG, to 2.1.240):

- hooks live in `~/.claude/settings.json` (user) and `.claude/settings.json`
  (project) as `hooks.<Event>: [{matcher, hooks: [{type, command, timeout}]}]`,
  timeout in seconds; entries of every file run, in parallel;
- `PreToolUse` may answer `hookSpecificOutput.updatedInput`, which replaces
  the tool input whole (so every field is copied); without a
  `permissionDecision` the user's permission flow runs on the new input;
- `PostToolUse` may answer `updatedToolOutput` (every tool since 2.1.121),
  which must have the tool's own output shape or it is silently ignored:
  Bash `{stdout, stderr, interrupted, …}`, Read `{type: "text", file:
  {content, …}}`, Grep `{content, …}`, WebFetch `{result, …}`, an MCP tool
  its content blocks; a failing Bash command fires `PostToolUseFailure`,
  which cannot replace anything, so Bash is wrapped before it runs;
- Cursor runs Claude Code's hooks too; there this hook does nothing and
  prints `{}`, and the Cursor hook acts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from spillvault.adapters.hooks import claude_rules
from spillvault.adapters.hooks.client import (
    HOOK_TIMEOUT_SECONDS,
    HookClient,
    Scope,
    hook_command,
    specific_output,
)
from spillvault.adapters.hooks.json_settings import (
    arranged,
    dump_settings,
    group_commands,
    group_without_ours,
    load_settings,
    matcher_group,
)
from spillvault.domain.shell_wrap import wrap_shell_command

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import TypeAlias

    Gate: TypeAlias = Callable[[str], str | None]

    from spillvault.adapters.hooks.client import HookContext

NAME: Final = "claude-code"
WHAT: Final = "Claude Code settings"
_STRIP: Final = group_without_ours(NAME)
GATED_AFTER: Final = "Bash|Read|Grep|WebFetch|mcp__.*"
MIN_OUTPUT_VERSION: Final = (2, 1, 121)
NO_OP: Final = "{}"
"""An answer that changes nothing, and that Cursor, running this hook, accepts."""


class ClaudeCode(HookClient):
    """Claude Code's settings.json hooks."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "Claude Code"
    events: ClassVar[tuple[str, ...]] = ("PreToolUse", "PostToolUse")
    shell_event: ClassVar[str | None] = "PreToolUse"
    output_event: ClassVar[str | None] = "PostToolUse"
    version_command: ClassVar[tuple[str, ...]] = ("claude", "--version")
    session_prefix: ClassVar[str] = "claude"

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """User: ~/.claude/settings.json; project: .claude/settings.json."""
        base = home if scope == "user" else project
        return base / ".claude" / "settings.json"

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return the settings with our two matcher groups, where older ones stood."""
        spillvault = command[0]
        entries = {
            "PreToolUse": self._group("Bash", spillvault, "PreToolUse"),
            "PostToolUse": self._group(GATED_AFTER, spillvault, "PostToolUse"),
        }
        data = load_settings(text, WHAT)
        return dump_settings(arranged(data, entries, _STRIP))

    def uninstall(self, text: str) -> str:
        """Return the settings without our handlers."""
        data = load_settings(text, WHAT)
        return dump_settings(arranged(data, {}, _STRIP))

    def installed(self, text: str | None) -> bool:
        """Tell whether a handler of ours is in the settings."""
        data = load_settings(text, WHAT)
        return data != arranged(data, {}, _STRIP)

    def caveats(self, version: str | None) -> list[str]:
        """Say what this version applies, and what rewriting does to permissions."""
        notes = [
            (
                "a rewritten command is judged by your permission rules as written: "
                "the hook reads your Bash rules and answers 'allow' only where one "
                "already allows the original; a deny or ask rule leaves it unwrapped"
            ),
            "in dontAsk and auto modes a command no rule allows is left unwrapped",
            (
                "a failing Bash command fires PostToolUseFailure, which cannot "
                "replace output: Bash is wrapped before it runs instead"
            ),
        ]
        parsed = _version_tuple(version)
        if parsed is not None and parsed < MIN_OUTPUT_VERSION:
            notes.insert(0, f"{version}: Read, Grep and WebFetch outputs are not "
                         "replaced before 2.1.121 (MCP outputs only)")  # fmt: skip
        return notes

    def _group(self, matcher: str, spillvault: str, event: str) -> dict[str, Any]:
        command = hook_command(spillvault, NAME, event)
        return matcher_group(matcher, command, HOOK_TIMEOUT_SECONDS)

    # answering events -----------------------------------------------------------

    def no_op(self, event: str) -> str:  # noqa: ARG002 - the same for every event
        """Return `{}`: no opinion, the call goes on as it was."""
        return NO_OP

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Wrap a Bash command before it runs, or gate a tool's output after."""
        if _in_cursor(payload, context.environ):
            return NO_OP
        if event == "PreToolUse":
            return self._before(payload, context)
        if event == "PostToolUse":
            return self._after(payload, context)
        return NO_OP

    def _before(self, payload: Mapping[str, Any], context: HookContext) -> str:
        tool_input = payload.get("tool_input")
        if payload.get("tool_name") != "Bash" or not isinstance(tool_input, dict):
            return NO_OP
        command = tool_input.get("command")
        if not isinstance(command, str) or tool_input.get("run_in_background"):
            return NO_OP
        rules = claude_rules.load_rules(_rule_files(payload, context.environ))
        decision = claude_rules.verdict(command, rules)
        if decision in {"deny", "ask"}:
            return NO_OP  # the user's own rule decides, on the command as written
        if decision == "none" and payload.get("permission_mode") in {"dontAsk", "auto"}:
            # These modes decide unasked; a wrapper would be judged, not the command.
            return NO_OP
        wrap = wrap_shell_command(
            command,
            spillvault=context.spillvault,
            session=self.session_for(payload, context.environ),
            shell=context.shell,
        )
        if wrap.command is None:
            return NO_OP
        output: dict[str, Any] = {
            "hookEventName": "PreToolUse",
            "updatedInput": {**tool_input, "command": wrap.command},
        }
        if decision == "allow":
            # The user's allow rule covers the command as written: no prompt is skipped.
            output["permissionDecision"] = "allow"
            output["permissionDecisionReason"] = (
                "allowed by your Bash rule; spillvault stores the full output"
            )
        return json.dumps({"hookSpecificOutput": output})

    def _after(self, payload: Mapping[str, Any], context: HookContext) -> str:
        tool = payload.get("tool_name")
        response = payload.get("tool_response")
        if not isinstance(tool, str) or _reads_spillvault(payload):
            return NO_OP
        session = self.session_for(payload, context.environ)
        replaced = _gated_response(
            tool, response, lambda text: context.gate(text, tool, session)
        )
        if replaced is None:
            return NO_OP
        output = {"hookEventName": "PostToolUse", "updatedToolOutput": replaced}
        return json.dumps({"hookSpecificOutput": output})

    # the doctor -------------------------------------------------------------------

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return our handler's command per event."""
        return group_commands(load_settings(text, WHAT), NAME)

    def _canary(self, event: str, cwd: str, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": "spillvault-doctor",
            "transcript_path": str(Path(cwd) / "doctor-transcript.jsonl"),
            "cwd": cwd,
            "permission_mode": "default",
            "hook_event_name": event,
            "tool_use_id": "toolu_spillvault_doctor",
            **fields,
        }

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Claude Code sends before a Bash call of `command`."""
        tool_input = {
            "command": command,
            "description": "spillvault doctor",
            "timeout": 120000,
        }
        return self._canary("PreToolUse", cwd, tool_name="Bash", tool_input=tool_input)

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Claude Code sends after Read returned `output`."""
        path = str(Path(cwd) / "doctor.log")
        lines = output.count("\n")
        response = {
            "type": "text",
            "file": {"filePath": path, "content": output, "numLines": lines,
                     "startLine": 1, "totalLines": lines},
        }  # fmt: skip
        return self._canary(
            "PostToolUse", cwd, tool_name="Read", tool_input={"file_path": path},
            tool_response=response,
        )  # fmt: skip

    def rewritten(self, stdout: str) -> str | None:
        """Return `updatedInput.command` of a PreToolUse answer."""
        output = specific_output(stdout)
        updated = output.get("updatedInput") if output else None
        command = updated.get("command") if isinstance(updated, dict) else None
        return command if isinstance(command, str) else None

    def shown(self, stdout: str) -> str | None:
        """Return the Read content a PostToolUse answer shows instead."""
        output = specific_output(stdout)
        replaced = output.get("updatedToolOutput") if output else None
        file = replaced.get("file") if isinstance(replaced, dict) else None
        content = file.get("content") if isinstance(file, dict) else None
        return content if isinstance(content, str) else None

    def check(self, event: str, stdout: str) -> list[str]:
        """Name what makes `stdout` an answer Claude Code would not apply."""
        try:
            data = json.loads(stdout)
        except ValueError:
            return ["stdout is not JSON: Claude Code would show it as text"]
        if not isinstance(data, dict):
            return ["stdout is not a JSON object"]
        output = data.get("hookSpecificOutput")
        if output is None:
            return []
        problems = []
        if not isinstance(output, dict) or output.get("hookEventName") != event:
            problems.append(f"hookSpecificOutput.hookEventName is not {event!r}")
        elif event == "PreToolUse":
            updated = output.get("updatedInput")
            if not isinstance(updated, dict) or not isinstance(
                updated.get("command"), str
            ):
                problems.append("updatedInput is not a Bash input with a command")
            if output.get("permissionDecision") not in {None, "allow", "deny", "ask"}:
                problems.append("permissionDecision is not allow, deny or ask")
        elif not isinstance(output.get("updatedToolOutput"), dict | list | str):
            problems.append("updatedToolOutput is missing")
        return problems


def _reads_spillvault(payload: Mapping[str, Any]) -> bool:
    """Tell whether a Bash call ran spillvault itself: its pages are bounded already."""
    tool_input = payload.get("tool_input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if payload.get("tool_name") != "Bash" or not isinstance(command, str):
        return False
    first = command.strip().split(maxsplit=1)[:1]
    return bool(first) and first[0].rsplit("/", 1)[-1] == "spillvault"


def _in_cursor(payload: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Tell whether Cursor runs this hook (it reads Claude Code's settings too)."""
    return bool(environ.get("CURSOR_VERSION")) or any(
        key in payload for key in ("cursor_version", "conversation_id")
    )


def _rule_files(payload: Mapping[str, Any], environ: Mapping[str, str]) -> list[Path]:
    home = Path(environ.get("HOME") or Path.home())
    cwd = payload.get("cwd")
    project = Path(
        environ.get("CLAUDE_PROJECT_DIR") or (cwd if isinstance(cwd, str) else ".")
    )
    return claude_rules.settings_files(home, project)


def _gated_response(tool: str, response: object, gate: Gate) -> object | None:
    """Return the tool's output with its text gated, in its own shape; None: as is."""
    if tool == "Bash" and isinstance(response, dict):
        return _replaced(response, ("stdout",), gate)
    if tool == "Read" and isinstance(response, dict) and response.get("type") == "text":
        return _replaced(response, ("file", "content"), gate)
    if tool == "Grep" and isinstance(response, dict):
        return _replaced(response, ("content",), gate)
    if tool == "WebFetch" and isinstance(response, dict):
        return _replaced(response, ("result",), gate)
    if tool.startswith("mcp__"):
        return _mcp_replaced(response, gate)
    return None


def _replaced(
    response: dict[str, Any], path: tuple[str, ...], gate: Gate
) -> object | None:
    """Return a copy of `response` with the text at `path` gated, or None."""
    holder: Any = response
    for key in path[:-1]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    text = holder.get(path[-1]) if isinstance(holder, dict) else None
    if not isinstance(text, str):
        return None
    shown = gate(text)
    if shown is None:
        return None
    copied: dict[str, Any] = json.loads(json.dumps(response))
    target: Any = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = shown
    return copied


def _mcp_replaced(response: object, gate: Gate) -> object | None:
    """Gate an MCP tool's output: a string, or its text blocks as one."""
    if isinstance(response, str):
        return gate(response)
    blocks = response.get("content") if isinstance(response, dict) else response
    if not isinstance(blocks, list):
        return None
    texts: list[str] = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str):
                return None
            texts.append(text)
    if not texts:
        return None
    shown = gate("\n".join(texts))
    if shown is None:
        return None
    others = [
        b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")
    ]
    replaced = [{"type": "text", "text": shown}, *others]
    return {**response, "content": replaced} if isinstance(response, dict) else replaced


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    """Parse `2.1.211 (Claude Code)` into (2, 1, 211)."""
    if not version:
        return None
    head = version.split()[0]
    try:
        return tuple(int(part) for part in head.split("."))
    except ValueError:
        return None


CLIENT: Final = ClaudeCode()

__all__ = ["CLIENT", "ClaudeCode"]
