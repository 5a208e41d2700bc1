"""pi: an extension file of ours wraps bash before it runs and gates tool results.

Facts relied on (`@mariozechner/pi-coding-agent` 0.73.1 on Node 20, run
through its own loader and runner; its `dist/core/extensions/types.d.ts`,
`loader.js`, `runner.js`, `agent-session.js`, `tools/bash.js`, `config.js`
and `docs/extensions.md`):

- extensions are found in `~/.pi/agent/extensions/` (`$PI_CODING_AGENT_DIR`
  replaces `~/.pi/agent`, `~` expanded) and `<cwd>/.pi/extensions/`, as
  `*.ts` or `*.js` files loaded by jiti; the default export is the factory
  `(pi) => void`; project extensions load, and their handlers run, before
  global ones; a change applies on restart or `/reload`;
- `pi.on("tool_call", (event, ctx))` gets `{type, toolCallId, toolName,
  input}`; mutating `event.input` in place changes what runs (the same
  object reaches the tool; no re-validation), the model's history keeps the
  original; a handler that throws blocks the tool, so ours catches all;
- `pi.on("tool_result", (event, ctx))` gets `{…, content, details,
  isError}` and may return `{content?, details?, isError?}`, a patch;
- bash output is cut to its last 2,000 lines or 50 KB before
  `tool_result`; a cut one has `details.truncation.truncated` and
  `details.fullOutputPath`, a temp file `pi-bash-<hex>.log` with all of
  it. A command that exits non-zero becomes an error result whose text
  names that file (`[Showing lines … Full output: <path>]`) and whose
  `details` are `{}`; either way the hook reads the file back;
- pi runs its bash tool with bash whatever `$SHELL` says; it has no
  permission system of its own (extensions gate tools, in load order);
- `pi --version` prints the version on stderr, nothing on stdout.
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
    HookConfigError,
    Scope,
    hook_command,
    json_object,
)
from spillvault.adapters.hooks.shim_outputs import (
    full_output,
    shown_instead,
    text_of,
)
from spillvault.domain.shell_wrap import wrap_shell_command

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from spillvault.adapters.hooks.client import HookContext

NAME: Final = "pi"
BEFORE: Final = "tool_call"
AFTER: Final = "tool_result"
MARKER: Final = "// spillvault-hook: pi"
FILE_NAME: Final = "spillvault.ts"
NO_OP: Final = "{}"
_NAMED_FULL_OUTPUT: Final = re.compile(r"Full output: (/\S*/pi-bash-[0-9a-f]+\.log)\]")
_STATUS: Final = re.compile(
    r"\n\n(Command (?:exited with code -?\d+|timed out after \d+ seconds|aborted))$"
)
_SPILLVAULT_LINE: Final = re.compile(r"^const SPILLVAULT = (\".*\");$", re.MULTILINE)

EXTENSION: Final = """\
// spillvault-hook: pi
// Written by `spillvault hook install pi`; `spillvault hook uninstall pi` removes
// it, and edits here are lost. A bash command runs under `spillvault run`, and a
// tool result over the limit is stored by spillvault: the model sees a bounded
// preview naming its handle. Any failure leaves the call as it was and says so.
import { spawnSync } from "node:child_process";

const SPILLVAULT = __SPILLVAULT__;
const TIMEOUT_MS = __TIMEOUT_MS__;
// The gate stores nothing under 29,000 characters: shorter results skip the call.
const MIN_CHARS = 20000;
const NAMED_FULL_OUTPUT = /Full output: \\/\\S*\\/pi-bash-[0-9a-f]+\\.log\\]/;

function warn(ctx, message) {
  const line = `spillvault: ${String(message).split("\\n")[0].slice(0, 500)}`;
  try {
    if (ctx && ctx.hasUI) return ctx.ui.notify(line, "warning");
  } catch {}
  try {
    process.stderr.write(`${line}\\n`);
  } catch {}
}

function ask(ctx, event, payload) {
  const done = spawnSync(SPILLVAULT, ["hook", "run", "pi", event], {
    input: JSON.stringify(payload),
    encoding: "utf8",
    timeout: TIMEOUT_MS,
    maxBuffer: 64 * 1024 * 1024,
    windowsHide: true,
  });
  if (done.error) throw done.error;
  if (done.status !== 0) {
    throw new Error(`spillvault exited ${done.status ?? done.signal}`);
  }
  const said = (done.stderr || "").trim();
  if (said) warn(ctx, said);
  const answer = JSON.parse(done.stdout || "{}");
  if (answer === null || typeof answer !== "object" || Array.isArray(answer)) {
    throw new Error("the answer is not a JSON object");
  }
  return answer;
}

function payload(event, ctx) {
  let session = "";
  try {
    session = ctx.sessionManager.getSessionId() || "";
  } catch {}
  const cwd = ctx && typeof ctx.cwd === "string" ? ctx.cwd : process.cwd();
  return { ...event, session_id: session, cwd };
}

function textOf(blocks) {
  return blocks
    .filter((block) => block && block.type === "text" && typeof block.text === "string")
    .map((block) => block.text)
    .join("\\n");
}

export default function spillvault(pi) {
  pi.on("tool_call", async (event, ctx) => {
    try {
      const input = event.input;
      if (event.toolName !== "bash" || !input || typeof input.command !== "string") {
        return undefined;
      }
      const answer = ask(ctx, "tool_call", payload(event, ctx));
      if (typeof answer.command === "string" && answer.command) {
        input.command = answer.command;
      }
    } catch (error) {
      const why = error && error.message ? error.message : error;
      warn(ctx, `tool_call: ${why}; the command runs as it was`);
    }
    return undefined;
  });
  pi.on("tool_result", async (event, ctx) => {
    try {
      if (!Array.isArray(event.content)) return undefined;
      const text = textOf(event.content);
      const details = event.details;
      const cut =
        (details && details.truncation && details.truncation.truncated === true) ||
        NAMED_FULL_OUTPUT.test(text);
      if (!cut && text.length < MIN_CHARS) return undefined;
      const answer = ask(ctx, "tool_result", payload(event, ctx));
      if (!Array.isArray(answer.content)) return undefined;
      const patch = { content: answer.content };
      if ("details" in answer) patch.details = answer.details;
      if (typeof answer.isError === "boolean") patch.isError = answer.isError;
      return patch;
    } catch (error) {
      const why = error && error.message ? error.message : error;
      warn(ctx, `tool_result: ${why}; the result is left as it was`);
      return undefined;
    }
  });
}
"""


class Pi(HookClient):
    """pi's extension file `spillvault.ts`."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "pi"
    events: ClassVar[tuple[str, ...]] = (BEFORE, AFTER)
    shell_event: ClassVar[str | None] = BEFORE
    output_event: ClassVar[str | None] = AFTER
    version_command: ClassVar[tuple[str, ...]] = ("pi", "--version")
    """pi prints its version on stderr (the doctor reads stdout, then stderr)."""
    session_prefix: ClassVar[str] = "pi"

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """User: ~/.pi/agent/extensions ($PI_CODING_AGENT_DIR); project: .pi/."""
        if scope == "project":
            return project / ".pi" / "extensions" / FILE_NAME
        agent = os.environ.get("PI_CODING_AGENT_DIR", "")
        if agent == "~" or agent.startswith("~/"):
            agent = str(home) + agent[1:]
        base = Path(agent) if agent else home / ".pi" / "agent"
        return base / "extensions" / FILE_NAME

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return the extension's source; refuse to replace a file not ours."""
        if text is not None and not self.installed(text):
            msg = "a file not written by spillvault is in the way; move it first"
            raise HookConfigError(msg)
        return (
            EXTENSION.replace("__SPILLVAULT__", json.dumps(command[0]))
            .replace("__TIMEOUT_MS__", str(HOOK_TIMEOUT_SECONDS * 1000))
        )  # fmt: skip

    def uninstall(self, text: str) -> None:
        """Return None: the extension file goes."""

    def installed(self, text: str | None) -> bool:
        """Tell whether the file is our extension (its first line is our marker)."""
        return text is not None and text.split("\n", 1)[0] == MARKER

    def caveats(self, version: str | None) -> list[str]:
        """Say what the rewrite shows, what it skips, and when it takes effect."""
        del version
        return [
            "pi loads extensions at startup: restart it, or /reload, after install",
            (
                "a tool_call handler of an extension loaded after spillvault's sees "
                "the wrapped command (project extensions load before global ones)"
            ),
            (
                "an extension that runs bash elsewhere (over ssh, in a container) "
                "gets the wrapped command, which needs spillvault there"
            ),
            (
                "a shellCommandPrefix setting runs outside the wrapper: its exported "
                "variables reach the command, its aliases and functions do not"
            ),
            "`!` commands typed in the prompt (user_bash) are not gated",
        ]

    # answering events -----------------------------------------------------------

    def no_op(self, event: str) -> str:  # noqa: ARG002 - the same for every event
        """Return `{}`: the call goes on as it was."""
        return NO_OP

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Wrap a bash command before it runs, or gate a tool's result after."""
        tool = payload.get("toolName")
        if not isinstance(tool, str):
            return NO_OP
        session = self.session_for(payload, context.environ)
        if event == BEFORE:
            return _before(tool, payload, context.spillvault, session)
        if event != AFTER:
            return NO_OP
        blocks = payload.get("content")
        text = text_of(blocks)
        if text is None or not isinstance(blocks, list):
            return NO_OP
        shown = shown_instead(
            text,
            full_output(_full_output_path(text, payload.get("details"))),
            lambda whole: context.gate(whole, tool, session),
        )
        if shown is None:
            return NO_OP
        status = _STATUS.search(text) if payload.get("isError") is True else None
        if status is not None and not shown.endswith(status[1]):
            shown += f"\n\n{status[1]}"
        others = [
            b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")
        ]
        return json.dumps({"content": [{"type": "text", "text": shown}, *others]})

    # the doctor -------------------------------------------------------------------

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return the command lines the extension runs, from its SPILLVAULT constant."""
        if not self.installed(text):
            return {}
        match = _SPILLVAULT_LINE.search(text)
        try:
            spillvault = json.loads(match[1]) if match else None
        except ValueError:
            spillvault = None
        if not isinstance(spillvault, str):
            return {}
        return {
            event: shlex.join(hook_command(spillvault, NAME, event))
            for event in self.events
        }

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Return what the extension sends before a bash call of `command`."""
        return {
            "type": BEFORE,
            "toolCallId": "call_spillvault_doctor",
            "toolName": "bash",
            "input": {"command": command},
            "session_id": "spillvault-doctor",
            "cwd": cwd,
        }

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return what the extension sends after `read` returned `output`."""
        path = str(Path(cwd) / "doctor.log")
        return {
            "type": AFTER,
            "toolCallId": "call_spillvault_doctor",
            "toolName": "read",
            "input": {"path": path},
            "content": [{"type": "text", "text": output}],
            "isError": False,
            "session_id": "spillvault-doctor",
            "cwd": cwd,
        }

    def rewritten(self, stdout: str) -> str | None:
        """Return the `command` of a tool_call answer."""
        answer = json_object(stdout)
        command = answer.get("command") if answer else None
        return command if isinstance(command, str) else None

    def shown(self, stdout: str) -> str | None:
        """Return the text of a tool_result answer's content."""
        answer = json_object(stdout)
        return text_of(answer.get("content")) if answer else None

    def check(self, event: str, stdout: str) -> list[str]:
        """Name what makes `stdout` an answer the extension would not apply."""
        answer = json_object(stdout)
        if answer is None:
            return ["stdout is not a JSON object: the extension leaves the call as is"]
        if event == BEFORE:
            command = answer.get("command")
            if "command" in answer and not (isinstance(command, str) and command):
                return ["command is not a non-empty string"]
            return []
        if event != AFTER:
            return [f"pi's extension runs no {event!r} hook"]
        problems = []
        if "content" in answer and text_of(answer["content"]) is None:
            problems.append("content is not a list of content blocks")
        if "isError" in answer and not isinstance(answer["isError"], bool):
            problems.append("isError is not a boolean")
        return problems


def _before(
    tool: str, payload: Mapping[str, Any], spillvault: str, session: str
) -> str:
    """Answer tool_call: the bash command under `spillvault run`, or nothing."""
    tool_input = payload.get("input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if tool != "bash" or not isinstance(command, str):
        return NO_OP
    # pi runs its bash tool with bash, whatever the user's login shell.
    wrap = wrap_shell_command(  # noqa: S604 - the shell's name, not subprocess's
        command, spillvault=spillvault, session=session, shell="bash"
    )
    return NO_OP if wrap.command is None else json.dumps({"command": wrap.command})


def _full_output_path(text: str, details: object) -> str | None:
    """Return the file pi saved the whole output in, if it names one."""
    if isinstance(details, dict) and isinstance(details.get("fullOutputPath"), str):
        return str(details["fullOutputPath"])
    # A failing command's result is an error whose details are gone: the text
    # still ends with pi's note naming the file.
    found = _NAMED_FULL_OUTPUT.findall(text)
    return str(found[-1]) if found else None


CLIENT: Final = Pi()

__all__ = ["CLIENT", "Pi"]
