"""Gemini CLI: `BeforeTool` wraps shell commands; `AfterTool` gates what tools returned.

Facts relied on (google-gemini/gemini-cli at 5411f11, v0.56.0-nightly; the
published @google/gemini-cli 0.61.0, run here):

- hooks live in `~/.gemini/settings.json` (user) and `.gemini/settings.json`
  (project) as `hooks.<Event>: [{matcher, hooks: [{type, command, timeout}]}]`,
  timeout in milliseconds, matcher an unanchored regular expression; on by
  default since 0.27.0 (`hooksConfig.enabled`); in an untrusted folder no
  settings hook runs, the user's own included;
- `BeforeTool` may answer `hookSpecificOutput.tool_input`, which replaces the
  arguments whole since 0.36.0 (so every field is copied); policy and
  confirmation then judge the new arguments as written, and `decision` can
  only block or force a prompt, never approve;
- that judgement reads a shell command's first word: read-only commands
  (`ls`, `cat`, `git log`, …) run unasked, `rm -f`, `git -c`, `find -exec`, …
  are always asked for; a wrapper would hide both, so those are left alone,
  as are commands a policy rule or `tools.allowed` entry names;
- `AfterTool` cannot replace an output, but may answer `tailToolCallRequest
  {name, args}` (since 0.31.0): that tool runs instead and its result reaches
  the model as the first tool's own; its hooks fire with
  `original_request_name`; the CLI's own 40,000-character cut of shell and
  MCP text comes after AfterTool, so the hook sees the output whole;
- `read_file` reads the workspace and the project's temp directory
  `<home>/.gemini/tmp/<slug>/` (slug from `projects.json`, the directory
  marked by `.project_root` since 0.29.0), at most 2,000 lines unless
  `end_line` asks for more, and at most 2,000 characters a line;
- `gemini --version` prints the bare version (`0.61.0`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from spillvault.adapters.hooks.client import (
    HOOK_TIMEOUT_SECONDS,
    HookClient,
    Scope,
    hook_command,
    specific_output,
)
from spillvault.adapters.hooks.gemini_rules import (
    json_file,
    judged_by_heuristics,
    named_by_policy,
    runtime_dir,
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
    from collections.abc import Mapping, Sequence

    from spillvault.adapters.hooks.client import HookContext

NAME: Final = "gemini"
WHAT: Final = "Gemini CLI settings"
_STRIP: Final = group_without_ours(NAME)
SHELL_TOOL: Final = "run_shell_command"
GATED_AFTER: Final = (
    "^(run_shell_command|read_file|read_many_files|grep_search"
    "|search_file_content|web_fetch|mcp_.+)$"
)
GATED_TOOLS: Final = frozenset(
    {"run_shell_command", "read_file", "read_many_files", "grep_search",
     "search_file_content", "web_fetch"}
)  # fmt: skip
TAIL_TOOL: Final = "read_file"
PREVIEW_DIR: Final = "spillvault"
READ_LINE_CHARS: Final = 1_000
"""The longest line a preview file holds: `read_file` cuts lines at 2,000
UTF-16 units, and a character is at most two of them."""
VERSION_NOTES: Final = (
    ((0, 24, 0), "hooks cannot rewrite tool input before 0.24.0"),
    ((0, 27, 0), "hooks are off before 0.27.0 unless `hooksConfig.enabled`"),
    ((0, 31, 0), "no tail calls before 0.31.0: tool outputs are not replaced"),
    ((0, 36, 0), "before 0.36.0 BeforeTool runs after the user approved the command"),
)
NO_OP: Final = "{}"
DECISIONS: Final = frozenset({"allow", "deny", "block", "ask", "approve"})

_HANDLE: Final = re.compile(r"\[tool result stored as ([A-Za-z0-9._-]+/[0-9]+);")


class Gemini(HookClient):
    """Gemini CLI's settings.json hooks."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "Gemini CLI"
    events: ClassVar[tuple[str, ...]] = ("BeforeTool", "AfterTool")
    shell_event: ClassVar[str | None] = "BeforeTool"
    output_event: ClassVar[str | None] = "AfterTool"
    version_command: ClassVar[tuple[str, ...]] = ("gemini", "--version")
    session_prefix: ClassVar[str] = "gemini"

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """User: ~/.gemini/settings.json; project: .gemini/settings.json."""
        base = home if scope == "user" else project
        return base / ".gemini" / "settings.json"

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return the settings with our two matcher groups, replacing older ones."""
        data = load_settings(text, WHAT)
        spillvault = command[0]
        entries = {
            "BeforeTool": self._group(f"^{SHELL_TOOL}$", spillvault, "BeforeTool"),
            "AfterTool": self._group(GATED_AFTER, spillvault, "AfterTool"),
        }
        return dump_settings(arranged(data, entries, _STRIP))

    def uninstall(self, text: str) -> str:
        """Return the settings without our handlers."""
        return dump_settings(arranged(load_settings(text, WHAT), {}, _STRIP))

    def installed(self, text: str | None) -> bool:
        """Tell whether a handler of ours is in the settings."""
        data = load_settings(text, WHAT)
        return data != arranged(data, {}, _STRIP)

    def caveats(self, version: str | None) -> list[str]:
        """Say what this version applies, and what trust and permissions do."""
        notes = [
            (
                "Gemini CLI runs no settings hook in an untrusted folder, not even "
                "those in ~/.gemini/settings.json: trust the folder, or nothing is "
                "gated there; `hooksConfig.enabled: false` turns them all off"
            ),
            (
                "a wrapped command is judged by Gemini's policy and confirmation as "
                "`spillvault run … -- bash -lc '…'`: commands a policy rule or "
                "`tools.allowed` entry names, and those Gemini's shell heuristics "
                "judge (read-only ones it runs unasked, `rm -f`, `git -c`, …), are "
                "left unwrapped and gated after they ran"
            ),
            (
                "never answer 'allow always' to a wrapped command: Gemini would "
                "allow the wrapper's path as a prefix, so every wrapped command; a "
                "saved rule stops the wrapping, one for this session does not"
            ),
            (
                "`--allowed-tools run_shell_command(…)` on the command line is "
                "invisible to the hook: without --yolo the wrapped command is not "
                "covered by it; put such rules in settings or a policy file"
            ),
            (
                "a long tool output is replaced by a tail call: Gemini runs "
                "read_file on a preview under ~/.gemini/tmp/<project>/spillvault/ "
                "and shows the model that as the tool's result; in a folder Gemini "
                "has not run in yet (no temp directory), or for a failed tool, the "
                "output is left as it was"
            ),
        ]
        parsed = _version_tuple(version)
        if parsed is None:
            return notes
        early = [f"{version}: {note}" for least, note in VERSION_NOTES
                 if parsed < least]  # fmt: skip
        return [*early, *notes]

    def _group(self, matcher: str, spillvault: str, event: str) -> dict[str, Any]:
        command = hook_command(spillvault, NAME, event)
        # Gemini's hook timeouts are milliseconds.
        timeout = HOOK_TIMEOUT_SECONDS * 1000
        return matcher_group(matcher, command, timeout, name="spillvault")

    # answering events -----------------------------------------------------------

    def no_op(self, event: str) -> str:  # noqa: ARG002 - the same for every event
        """Return `{}`: no opinion, the call goes on as it was."""
        return NO_OP

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Wrap a shell command before it runs, or gate a tool's output after."""
        if payload.get("original_request_name"):
            return NO_OP  # a tail call (ours, or another hook's): as it is
        if event == "BeforeTool":
            return self._before(payload, context)
        if event == "AfterTool":
            return self._after(payload, context)
        return NO_OP

    def _before(self, payload: Mapping[str, Any], context: HookContext) -> str:
        tool_input = payload.get("tool_input")
        if payload.get("tool_name") != SHELL_TOOL or not isinstance(tool_input, dict):
            return NO_OP
        command = tool_input.get("command")
        if not isinstance(command, str) or tool_input.get("is_background"):
            return NO_OP
        if judged_by_heuristics(command):
            return NO_OP  # Gemini's own judgement reads the command as written
        wrap = wrap_shell_command(
            command,
            spillvault=context.spillvault,
            session=self.session_for(payload, context.environ),
            shell=context.shell,
        )
        if wrap.command is None:
            return NO_OP
        updated = {**tool_input, "command": wrap.command}
        project = _project(payload, context.environ)
        if named_by_policy(tool_input, updated, project, context.environ):
            return NO_OP  # the user's rule decides, on the command as written
        output = {"hookEventName": "BeforeTool", "tool_input": updated}
        return json.dumps({"hookSpecificOutput": output})

    def _after(self, payload: Mapping[str, Any], context: HookContext) -> str:
        tool = payload.get("tool_name")
        response = payload.get("tool_response")
        if not isinstance(tool, str) or not isinstance(response, dict):
            return NO_OP
        if not _gated(tool, payload) or response.get("error"):
            return NO_OP
        text = _text_of(response.get("llmContent"))
        if text is None:
            return NO_OP
        directory = _project_temp_dir(payload, context.environ)
        if directory is None:
            return NO_OP  # read_file could not reach a preview: keep the output
        shown = context.gate(text, tool, self.session_for(payload, context.environ))
        if shown is None:
            return NO_OP
        path, lines = _write_preview(directory, shown)
        args = {"file_path": str(path), "start_line": 1, "end_line": lines}
        output = {
            "hookEventName": "AfterTool",
            "tailToolCallRequest": {"name": TAIL_TOOL, "args": args},
        }
        return json.dumps({"hookSpecificOutput": output})

    # the doctor -------------------------------------------------------------------

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return our handler's command per event."""
        return group_commands(load_settings(text, WHAT), NAME)

    def _canary(self, event: str, cwd: str, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": "spillvault-doctor",
            "transcript_path": "",
            "cwd": cwd,
            "hook_event_name": event,
            "timestamp": "2026-01-01T00:00:00.000Z",
            **fields,
        }

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Gemini CLI sends before a run_shell_command of `command`."""
        tool_input = {"command": command, "description": "spillvault doctor"}
        return self._canary("BeforeTool", cwd, tool_name=SHELL_TOOL,
                            tool_input=tool_input)  # fmt: skip

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return the stdin Gemini CLI sends after read_file returned `output`."""
        path = str(Path(cwd) / "doctor.log")
        response = {"llmContent": output, "returnDisplay": ""}
        return self._canary(
            "AfterTool", cwd, tool_name="read_file", tool_input={"file_path": path},
            tool_response=response,
        )  # fmt: skip

    def rewritten(self, stdout: str) -> str | None:
        """Return `tool_input.command` of a BeforeTool answer."""
        output = specific_output(stdout)
        updated = output.get("tool_input") if output else None
        command = updated.get("command") if isinstance(updated, dict) else None
        return command if isinstance(command, str) else None

    def shown(self, stdout: str) -> str | None:
        """Return what the tail call of an AfterTool answer reads to the model."""
        output = specific_output(stdout)
        request = output.get("tailToolCallRequest") if output else None
        if not isinstance(request, dict) or request.get("name") != TAIL_TOOL:
            return None
        args = request.get("args")
        if not isinstance(args, dict) or not isinstance(args.get("file_path"), str):
            return None
        start, end = args.get("start_line", 1), args.get("end_line")
        if not isinstance(start, int) or not isinstance(end, int | None):
            return None
        try:
            text = Path(args["file_path"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        lines = re.split(r"\r?\n", text)
        return "\n".join(lines[start - 1 : end or start + 1_999])

    def check(self, event: str, stdout: str) -> list[str]:
        """Name what makes `stdout` an answer Gemini CLI would not apply."""
        try:
            data = json.loads(stdout)
        except ValueError:
            return ["stdout is not JSON: Gemini CLI would take it as a system message"]
        if not isinstance(data, dict):
            return ["stdout is not a JSON object"]
        problems = []
        if "decision" in data and data["decision"] not in DECISIONS:
            problems.append("decision is not allow, deny, block, ask or approve")
        output = data.get("hookSpecificOutput")
        if output is None:
            return problems
        if not isinstance(output, dict):
            return [*problems, "hookSpecificOutput is not an object"]
        if output.get("hookEventName", event) != event:
            problems.append(f"hookSpecificOutput.hookEventName is not {event!r}")
        return problems + _specific_problems(event, output)


def _specific_problems(event: str, output: dict[str, Any]) -> list[str]:
    """Name what in `hookSpecificOutput` Gemini CLI would not apply for `event`."""
    if event == "BeforeTool" and "tool_input" in output:
        updated = output["tool_input"]
        if not isinstance(updated, dict) or not isinstance(updated.get("command"), str):
            return ["tool_input is not shell arguments with a command"]
    if event == "AfterTool" and "tailToolCallRequest" in output:
        request = output["tailToolCallRequest"]
        if not (
            isinstance(request, dict)
            and isinstance(request.get("name"), str)
            and isinstance(request.get("args"), dict)
        ):
            return ["tailToolCallRequest is not {name, args}"]
    return []


# where a preview can be read from ---------------------------------------------------


def _gated(tool: str, payload: Mapping[str, Any]) -> bool:
    """Tell whether `tool`'s output is gated (a wrapped command's already is)."""
    if tool == SHELL_TOOL:
        tool_input = payload.get("tool_input")
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        return isinstance(command, str) and not _is_wrapped(command)
    return (
        tool in GATED_TOOLS
        or tool.startswith("mcp_")
        or isinstance(payload.get("mcp_context"), dict)
    )


def _is_wrapped(command: str) -> bool:
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return (
        len(words) > 1
        and os.path.basename(words[0]) == "spillvault"
        and (words[1] == "run")
    )


def _text_of(content: object) -> str | None:
    """Return a tool's `llmContent` as the model reads it, when it is all text."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            return None  # an image, a file, a function response: kept as it is
    return "\n".join(texts) if texts else None


def _project(payload: Mapping[str, Any], environ: Mapping[str, str]) -> Path:
    cwd = payload.get("cwd")
    return Path(cwd if isinstance(cwd, str) and cwd else
                environ.get("GEMINI_PROJECT_DIR") or ".")  # fmt: skip


def _project_temp_dir(
    payload: Mapping[str, Any], environ: Mapping[str, str]
) -> Path | None:
    """Return the project's temp directory `read_file` may read, or None.

    The session's transcript lies in `<temp>/chats/`; without one, the slug
    comes from `projects.json`. Either must carry the `.project_root` marker
    naming the folder Gemini runs in (or one above it).
    """
    cwd = os.path.normpath(str(_project(payload, environ).absolute()))
    runtime = runtime_dir(environ)
    candidates = []
    transcript = payload.get("transcript_path")
    if isinstance(transcript, str) and transcript:
        chats = Path(transcript).parent
        if chats.name == "chats":
            candidates.append(chats.parent)
    try:
        projects = json_file(runtime / "projects.json").get("projects")
    except (OSError, ValueError):
        projects = None
    slug = projects.get(cwd) if isinstance(projects, dict) else None
    if isinstance(slug, str) and slug and "/" not in slug and slug not in {".", ".."}:
        candidates.append(runtime / "tmp" / slug)
    for candidate in candidates:
        try:
            owner = (candidate / ".project_root").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        owner = os.path.normpath(owner)
        if owner and (cwd == owner or cwd.startswith(owner.rstrip(os.sep) + os.sep)):
            return candidate
    return None


def _write_preview(directory: Path, shown: str) -> tuple[Path, int]:
    """Write the preview where read_file may read it; return it and its line count."""
    lines = []
    for line in shown.split("\n"):
        lines += [line[i : i + READ_LINE_CHARS]
                  for i in range(0, len(line), READ_LINE_CHARS)] or [""]  # fmt: skip
    text = "\n".join(lines)
    import hashlib  # noqa: PLC0415 - only when an output is replaced
    import tempfile  # noqa: PLC0415

    match = _HANDLE.search(shown)
    name = match[1] if match else hashlib.sha256(shown.encode()).hexdigest()[:16]
    path = directory / PREVIEW_DIR / f"{name}.txt"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)

    handle, temp = tempfile.mkstemp(prefix=".preview.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path, len(re.split(r"\r?\n", text))


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    """Parse `0.61.0` (or `0.57.0-preview.0`) into (0, 61, 0)."""
    if not version:
        return None
    head = version.split()[0].split("-")[0]
    try:
        return tuple(int(part) for part in head.split("."))
    except ValueError:
        return None


CLIENT: Final = Gemini()

__all__ = ["CLIENT", "Gemini"]
