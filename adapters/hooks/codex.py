"""Codex CLI: `PreToolUse` wraps Bash; no hook can replace a tool's output.

Facts relied on (openai/codex source as stored in the public index: hooks
`pre_tool_use.rs` and `discovery.rs` @0082977, `output_parser.rs` @0ea8381,
`config/src/hook_config.rs` @012d0aa, the generated pre-tool-use schemas
@3be4afd; the schemas embedded in codex-cli 0.144.1; docs
developers.openai.com/codex/hooks):

- hooks live in `~/.codex/hooks.json` (user) and `.codex/hooks.json`
  (project, loaded only in a trusted project) as `{"hooks": {"PreToolUse":
  [{matcher, hooks: [{type, command, timeout}]}]}}`, timeout in seconds; a
  root key other than `hooks` (and `description`, newer releases) makes
  Codex refuse the whole file, so install refuses such a file rather than
  write into one Codex would skip (a `$schema` is the common case);
- every non-managed hook runs only once trusted: `/hooks` in the TUI writes
  `[hooks.state."<hooks.json>:pre_tool_use:<group>:<handler>"] trusted_hash`
  to `~/.codex/config.toml`; an untrusted or changed hook is skipped with
  only a startup warning. The hash is Codex's own: `trust_state` reads
  whether one is recorded, never computes or writes one; install keeps our
  group where it stood, so its key, and a trust, survive a reinstall;
- `PreToolUse` gets `tool_name: "Bash"` for every shell tool with
  `tool_input: {"command": <string>}`; its answer is applied only as
  `hookSpecificOutput {hookEventName, permissionDecision: "allow",
  updatedInput}`: updatedInput without "allow", or "allow" without it, is
  an error and the command runs as it was; an unknown field anywhere makes
  the whole answer invalid (fail open); empty stdout is no opinion. The
  rewrite needs codex-cli 0.131.0 (openai/codex#20527); older versions
  reject updatedInput;
- "allow" here is the form Codex requires for a rewrite, not an approval:
  the rewritten command still goes through Codex's approval policy and
  sandbox (openai/codex#20702's stated design; awslabs/aidlc-workflows#1004;
  read in source and PRs, not run here: medium confidence);
- `PostToolUse` cannot replace output (`updatedMCPToolOutput` fails,
  `updatedToolOutput` was never merged), so it is not installed;
- newer builds may send `kind`, `program`, `args` or `script_body` beside
  `command` (unverified): all are copied, and a `powershell_script` is left
  alone, since the wrapper runs a POSIX shell.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from spillvault.adapters.hooks.client import (
    HOOK_TIMEOUT_SECONDS,
    HookClient,
    HookConfigError,
    Scope,
    hook_command,
    specific_output,
)
from spillvault.adapters.hooks.json_settings import (
    arranged,
    dump_settings,
    group_without_ours,
    is_ours,
    load_settings,
    matcher_group,
)
from spillvault.domain.shell_wrap import wrap_shell_command

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from spillvault.adapters.hooks.client import HookContext

NAME: Final = "codex"
WHAT: Final = "Codex hooks.json"
_STRIP: Final = group_without_ours(NAME)
EVENT: Final = "PreToolUse"
MATCHER: Final = "^Bash$"
TRUST_EVENT: Final = "pre_tool_use"
ROOT_KEYS: Final = frozenset({"hooks", "description"})
MIN_REWRITE_VERSION: Final = (0, 131, 0)
NO_OP: Final = ""
"""Empty stdout: no opinion, the command runs as it was (pre_tool_use.rs)."""
OUTPUT_FIELDS: Final = frozenset(
    {"continue", "decision", "reason", "hookSpecificOutput", "stopReason",
     "suppressOutput", "systemMessage"}
)  # fmt: skip
SPECIFIC_FIELDS: Final = frozenset(
    {"hookEventName", "permissionDecision", "permissionDecisionReason",
     "updatedInput", "additionalContext"}
)  # fmt: skip
_VERSION: Final = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class Codex(HookClient):
    """Codex CLI's hooks.json hooks."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "Codex"
    events: ClassVar[tuple[str, ...]] = (EVENT,)
    shell_event: ClassVar[str | None] = EVENT
    output_event: ClassVar[str | None] = None
    version_command: ClassVar[tuple[str, ...]] = ("codex", "--version")
    session_prefix: ClassVar[str] = "codex"

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """User: $CODEX_HOME/hooks.json (~/.codex); project: .codex/hooks.json."""
        if scope == "user":
            return _codex_home(home) / "hooks.json"
        return project / ".codex" / "hooks.json"

    def readiness(self, config: Path, home: Path) -> list[tuple[bool, str]]:
        """Hooks must be on, and ours trusted once in the TUI (`/hooks`)."""
        settings = _codex_home(home) / "config.toml"
        try:
            toml_text: str | None = settings.read_text(encoding="utf-8")
        except OSError:
            toml_text = None
        found = []
        enabled = hooks_enabled(toml_text)
        if enabled is False:
            found.append(
                (False, f"{settings}: [features] hooks = false turns hooks off")
            )
        trusted = trust_state(toml_text, config)
        if trusted is False:
            untrusted = (
                "Codex has not trusted the hook yet: start codex, open /hooks and "
                "trust it (an untrusted hook is skipped silently)"
            )
            found.append((False, untrusted))
        elif trusted:
            found.append((True, f"{settings}: the hook is trusted"))
        return found

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return hooks.json with our Bash group where ours stood, else last."""
        data = load_settings(text, WHAT)
        unknown = sorted(set(data) - ROOT_KEYS)
        if unknown:
            msg = (
                f"{WHAT} has root keys Codex refuses ({', '.join(unknown)}): it would "
                "skip the whole file; remove them first; left untouched"
            )
            raise HookConfigError(msg)
        wanted = arranged(data, {EVENT: self._group(command[0])}, _STRIP)
        if text is not None and wanted == data:
            return text  # already in: the file, and its trust, stay as they are
        return dump_settings(wanted)

    def uninstall(self, text: str) -> str:
        """Return hooks.json without our handlers; a group only they were in goes."""
        return dump_settings(arranged(load_settings(text, WHAT), {}, _STRIP))

    def installed(self, text: str | None) -> bool:
        """Tell whether a handler of ours is in hooks.json."""
        return bool(self.hook_commands(text or ""))

    def caveats(self, version: str | None) -> list[str]:
        """Say what this version rewrites, and what trust, approval and sandbox ask."""
        notes = [
            (
                "Codex runs a new or changed hook only once you trust it: open "
                "codex, type /hooks, trust spillvault's PreToolUse hook; until then "
                "it is skipped with only a startup warning (codex exec cannot trust; "
                "--dangerously-bypass-hook-trust runs it anyway). `spillvault hook "
                "status` and the doctor read its trusted_hash under [hooks.state] "
                "in ~/.codex/config.toml; reinstalling with another spillvault path "
                "asks for trust again"
            ),
            (
                "a rewritten command still goes through Codex's approval and "
                "sandbox: the prompt shows `spillvault run … -- bash -lc '<cmd>'`, "
                "and rules for the original command do not match the wrapper; "
                "never approve a rule for `spillvault run` itself"
            ),
            (
                "in the workspace-write sandbox spillvault cannot store unless its "
                "sessions root is writable: add it to "
                "[sandbox_workspace_write] writable_roots; else --fail-open runs the "
                "command unstored"
            ),
            (
                "Codex hooks cannot replace a tool's output: only shell commands are "
                "gated (MCP servers: spillvault mcp proxy)"
            ),
        ]
        parsed = _version_tuple(version)
        if parsed is not None and parsed < MIN_REWRITE_VERSION:
            old = (
                f"{version}: PreToolUse rewrites need codex-cli 0.131.0; this one "
                "rejects them and runs every command unwrapped"
            )
            notes.insert(0, old)
        return notes

    def _group(self, spillvault: str) -> dict[str, Any]:
        command = hook_command(spillvault, NAME, EVENT)
        return matcher_group(MATCHER, command, HOOK_TIMEOUT_SECONDS)

    # answering events -----------------------------------------------------------

    def no_op(self, event: str) -> str:  # noqa: ARG002 - the same for every event
        """Return empty stdout: no opinion, the call goes on as it was."""
        return NO_OP

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Wrap a Bash command before it runs; anything else: no opinion."""
        tool_input = payload.get("tool_input")
        if (
            event != EVENT
            or payload.get("tool_name") != "Bash"
            or not isinstance(tool_input, dict)
            or tool_input.get("kind") == "powershell_script"
        ):
            return NO_OP
        command = tool_input.get("command")
        if not isinstance(command, str):
            return NO_OP
        wrap = wrap_shell_command(
            command,
            spillvault=context.spillvault,
            session=self.session_for(payload, context.environ),
            shell=context.shell,
        )
        if wrap.command is None:
            return NO_OP
        output = {
            "hookEventName": EVENT,
            # The only form Codex applies updatedInput in; its approval still runs.
            "permissionDecision": "allow",
            "updatedInput": {**tool_input, "command": wrap.command},
        }
        return json.dumps({"hookSpecificOutput": output})

    # the doctor -------------------------------------------------------------------

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return our handler's command per event."""
        found: dict[str, str] = {}
        for event, handler in _handlers(load_settings(text, WHAT)):
            if _is_our_handler(handler):
                found[event] = handler["command"]
        return found

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Codex sends before a shell call of `command`."""
        return {
            "session_id": "019a0000-0000-7000-8000-00000000d0c7",
            "turn_id": "spillvault-doctor",
            "transcript_path": None,
            "cwd": cwd,
            "hook_event_name": EVENT,
            "model": "gpt-5-codex",
            "permission_mode": "default",
            "tool_name": "Bash",
            "tool_use_id": "call_spillvault_doctor",
            "tool_input": {"command": command},
        }

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Codex sends after a shell call returned `output`."""
        canary = self.shell_canary("spillvault doctor", cwd)
        return {**canary, "hook_event_name": "PostToolUse", "tool_response": output}

    def rewritten(self, stdout: str) -> str | None:
        """Return `updatedInput.command` of a PreToolUse answer."""
        output = specific_output(stdout)
        updated = output.get("updatedInput") if output else None
        command = updated.get("command") if isinstance(updated, dict) else None
        return command if isinstance(command, str) else None

    def shown(self, stdout: str) -> str | None:  # noqa: ARG002 - Codex cannot replace
        """Return None: no Codex answer replaces a tool's output."""
        return None

    def check(self, event: str, stdout: str) -> list[str]:
        """Name what makes `stdout` an answer Codex would reject (or not apply)."""
        if not stdout.strip():
            return []
        try:
            data = json.loads(stdout)
        except ValueError:
            return ["stdout is not JSON: Codex fails a hook whose output looks like it"]
        if not isinstance(data, dict):
            return ["stdout is not a JSON object"]
        problems = [
            f"unknown field {key!r}: Codex rejects the whole answer"
            for key in sorted(set(data) - OUTPUT_FIELDS)
        ] + _universal_problems(data)
        output = data.get("hookSpecificOutput")
        if output is None:
            return problems
        if not isinstance(output, dict):
            return [*problems, "hookSpecificOutput is not an object"]
        problems += [
            f"unknown field hookSpecificOutput.{key}: Codex rejects the whole answer"
            for key in sorted(set(output) - SPECIFIC_FIELDS)
        ]
        if output.get("hookEventName") != event:
            problems.append(f"hookSpecificOutput.hookEventName is not {event!r}")
        return problems + _decision_problems(output)


def _codex_home(home: Path) -> Path:
    """Return Codex's own directory: $CODEX_HOME, else ~/.codex."""
    chosen = os.environ.get("CODEX_HOME")
    return Path(chosen) if chosen else home / ".codex"


def trust_state(
    config_toml_text: str | None,
    hooks_json_path: Path | str,
    *,
    hooks_text: str | None = None,
) -> bool | None:
    """Tell whether Codex has a trust recorded for our hook in `hooks_json_path`.

    True: `[hooks.state."<path>:pre_tool_use:<g>:<h>"]` holds a trusted_hash
    for every handler of ours (whether it still matches the hook is Codex's
    to judge: the hash is not recomputed here); False: one has none, or is
    disabled; None: unknown (a file unreadable, or no hook of ours). A missing
    config.toml (None) trusts nothing. `hooks_text` is the hooks.json's text,
    read from `hooks_json_path` when not given.
    """
    import tomllib  # noqa: PLC0415 - for status and the doctor, never `hook run`

    if hooks_text is None:
        try:
            with open(hooks_json_path, encoding="utf-8") as file:
                hooks_text = file.read()
        except OSError:
            return None
    try:
        positions = _our_positions(load_settings(hooks_text, WHAT))
        config = tomllib.loads(config_toml_text or "")
    except (HookConfigError, tomllib.TOMLDecodeError):
        return None
    if not positions:
        return None
    hooks = config.get("hooks")
    states = hooks.get("state") if isinstance(hooks, dict) else None
    states = states if isinstance(states, dict) else {}
    sources = _path_spellings(str(hooks_json_path))
    for group, handler in positions:
        keys = [f"{source}:{TRUST_EVENT}:{group}:{handler}" for source in sources]
        state = next((states[key] for key in keys if key in states), None)
        if not isinstance(state, dict) or state.get("enabled") is False:
            return False
        trusted = state.get("trusted_hash")
        if not isinstance(trusted, str) or not trusted:
            return False
    return True


def hooks_enabled(config_toml_text: str | None) -> bool | None:
    """Tell whether config.toml leaves hooks on (`[features] hooks`); None: unknown."""
    import tomllib  # noqa: PLC0415 - for status and the doctor, never `hook run`

    try:
        config = tomllib.loads(config_toml_text or "")
    except tomllib.TOMLDecodeError:
        return None
    features = config.get("features")
    if not isinstance(features, dict):
        return True
    # `codex_hooks`: the older, deprecated name of the same switch
    return all(features.get(key) is not False for key in ("hooks", "codex_hooks"))


def _path_spellings(path: str) -> list[str]:
    """Return the ways Codex may spell the hooks.json path in a trust key."""
    spellings = [path, os.path.abspath(path), os.path.realpath(path)]
    return list(dict.fromkeys(spellings))


def _our_positions(data: dict[str, Any]) -> list[tuple[int, int]]:
    """Return (group, handler) of each PreToolUse handler of ours."""
    groups = data.get("hooks", {}).get(EVENT, [])
    positions = []
    for group_index, group in enumerate(groups):
        handlers = group.get("hooks") if isinstance(group, dict) else None
        for handler_index, handler in enumerate(
            handlers if isinstance(handlers, list) else []
        ):
            if _is_our_handler(handler):
                positions.append((group_index, handler_index))
    return positions


def _universal_problems(data: dict[str, Any]) -> list[str]:
    """Name what Codex's output parser rejects in a PreToolUse answer's top level."""
    decision, reason = data.get("decision"), data.get("reason")
    rules = (
        (data.get("continue", True) is not True, "continue: false is unsupported"),
        ("stopReason" in data, "stopReason is unsupported"),
        (data.get("suppressOutput", False) is not False,
         "suppressOutput is unsupported"),
        (decision not in {None, "block"},
         f"decision: {decision!r} is unsupported (block only)"),
        (decision == "block" and not (isinstance(reason, str) and reason.strip()),
         "decision: block needs a reason"),
        (decision is None and reason is not None, "reason without decision"),
    )  # fmt: skip
    return [problem for broken, problem in rules if broken]


def _decision_problems(output: dict[str, Any]) -> list[str]:
    """Name what Codex's output parser rejects in a PreToolUse decision."""
    decision = output.get("permissionDecision")
    updated = output.get("updatedInput")
    reason = output.get("permissionDecisionReason")
    command = updated.get("command") if isinstance(updated, dict) else None
    rules = (
        (decision not in {None, "allow", "deny", "ask"},
         "permissionDecision is not allow, deny or ask"),
        (updated is not None and decision != "allow",
         "updatedInput without permissionDecision: allow is not applied"),
        (decision == "allow" and updated is None,
         "permissionDecision: allow without updatedInput is unsupported"),
        (decision == "ask", "permissionDecision: ask is unsupported"),
        (decision == "deny" and not (isinstance(reason, str) and reason.strip()),
         "permissionDecision: deny needs a permissionDecisionReason"),
        (decision is None and reason is not None,
         "permissionDecisionReason without permissionDecision"),
        (updated is not None and not isinstance(command, str),
         "updatedInput is not a Bash input with a command"),
    )  # fmt: skip
    return [problem for broken, problem in rules if broken]


def _is_our_handler(handler: object) -> bool:
    return isinstance(handler, dict) and is_ours(handler.get("command"), NAME)


def _handlers(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Return (event, handler) for every handler object in the file."""
    found: list[tuple[str, dict[str, Any]]] = []
    for event, groups in data.get("hooks", {}).items():
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            listed = handlers if isinstance(handlers, list) else []
            found.extend((event, h) for h in listed if isinstance(h, dict))
    return found


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    """Parse `codex-cli 0.131.0` into (0, 131, 0)."""
    match = _VERSION.search(version or "")
    return tuple(int(part) for part in match.groups()) if match else None


CLIENT: Final = Codex()

__all__ = ["CLIENT", "Codex", "hooks_enabled", "trust_state"]
