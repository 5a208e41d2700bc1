"""OpenCode: a plugin file of ours gates what tools returned; bash is not rewritten.

Facts relied on (`opencode-ai` 1.18.33 on Linux, run; the JS bundled in its
binary; `@opencode-ai/plugin@1.18.33` `dist/index.d.ts`; opencode.ai docs):

- every config directory is globbed with `{plugin,plugins}/*.{ts,js}`: the
  global one (`$XDG_CONFIG_HOME/opencode`, else `~/.config/opencode`) and
  each `.opencode/` walking up from the project; the docs name `plugins/`.
  A module's exports must all be plugin functions (a constant export is a
  TypeError), loaded once per process: a change needs a restart;
- `tool.execute.after(input {tool, sessionID, callID, args}, output)` runs
  awaited after every tool, before its output reaches the model; a built-in
  tool's `output` is `{title, output, metadata}` and assigning
  `output.output` is what the model sees; an MCP tool's is the raw
  `CallToolResult`, and assigning `output.content` is; a throw becomes the
  tool's result, so the plugin catches everything;
- the output is cut before the hook (2,000 lines or 50 KB); a cut one has
  `metadata.truncated` and `metadata.outputPath`, a file with all of it,
  which the hook gates instead (a bash run writes every byte there);
- `tool.execute.before` could rewrite `output.args.command` in place, but
  bash permission rules, and the outside-directory check of `rm`, `cp`,
  `cat` and the like, are judged inside the bash tool, after plugins, on
  the command text: a wrapper would escape them, so none is installed (the
  model would also see the wrapper as its own call, issue #37963);
- `opencode --version` prints the version on stdout.
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

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from spillvault.adapters.hooks.client import HookContext

NAME: Final = "opencode"
AFTER: Final = "tool.execute.after"
MARKER: Final = "// spillvault-hook: opencode"
FILE_NAME: Final = "spillvault.js"
NO_OP: Final = "{}"
_SPILLVAULT_LINE: Final = re.compile(r"^const SPILLVAULT = (\".*\");$", re.MULTILINE)

PLUGIN: Final = """\
// spillvault-hook: opencode
// Written by `spillvault hook install opencode`; `spillvault hook uninstall opencode`
// removes it, and edits here are lost. A tool output over the limit is stored by
// spillvault and the model sees a bounded preview naming its handle. Any failure
// leaves the output as it was and says so on stderr. Only plugin functions may be
// exported from this file: OpenCode rejects any other export.
import { spawnSync } from "node:child_process";

const SPILLVAULT = __SPILLVAULT__;
const TIMEOUT_MS = __TIMEOUT_MS__;
// The gate stores nothing under 29,000 characters: shorter outputs skip the call.
const MIN_CHARS = 20000;

function warn(message) {
  try {
    const line = String(message).split("\\n")[0].slice(0, 500);
    process.stderr.write(`spillvault (OpenCode plugin): ${line}\\n`);
  } catch {}
}

function ask(event, payload) {
  const done = spawnSync(SPILLVAULT, ["hook", "run", "opencode", event], {
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
  if (said) warn(said);
  const answer = JSON.parse(done.stdout || "{}");
  if (answer === null || typeof answer !== "object" || Array.isArray(answer)) {
    throw new Error("the answer is not a JSON object");
  }
  return answer;
}

function textOf(blocks) {
  return blocks
    .filter((block) => block && block.type === "text" && typeof block.text === "string")
    .map((block) => block.text)
    .join("\\n");
}

export const SpillvaultPlugin = async () => ({
  "tool.execute.after": async (input, output) => {
    try {
      if (output === null || typeof output !== "object") return;
      const mcp = typeof output.output !== "string";
      if (mcp && !Array.isArray(output.content)) return;
      const text = mcp ? textOf(output.content) : output.output;
      const meta = output.metadata;
      const cut =
        !mcp && meta && meta.truncated === true && typeof meta.outputPath === "string";
      if (!cut && text.length < MIN_CHARS) return;
      const answer = ask("tool.execute.after", { input, output });
      if (!mcp && typeof answer.output === "string") output.output = answer.output;
      if (mcp && Array.isArray(answer.content)) output.content = answer.content;
    } catch (error) {
      const why = error && error.message ? error.message : error;
      warn(`${input && input.tool}: ${why}; the output is left as it was`);
    }
  },
});
"""


class OpenCode(HookClient):
    """OpenCode's plugin file `spillvault.js`."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "OpenCode"
    events: ClassVar[tuple[str, ...]] = (AFTER,)
    shell_event: ClassVar[str | None] = None
    output_event: ClassVar[str | None] = AFTER
    version_command: ClassVar[tuple[str, ...]] = ("opencode", "--version")
    session_prefix: ClassVar[str] = "opencode"

    def config_path(self, scope: Scope, *, home: Path, project: Path) -> Path:
        """User: $XDG_CONFIG_HOME/opencode/plugins; project: .opencode/plugins."""
        if scope == "project":
            return project / ".opencode" / "plugins" / FILE_NAME
        xdg = os.environ.get("XDG_CONFIG_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else home / ".config"
        return base / "opencode" / "plugins" / FILE_NAME

    def install(self, text: str | None, command: Sequence[str]) -> str:
        """Return the plugin's source; refuse to replace a file not ours."""
        if text is not None and not self.installed(text):
            msg = "a file not written by spillvault is in the way; move it first"
            raise HookConfigError(msg)
        return (
            PLUGIN.replace("__SPILLVAULT__", json.dumps(command[0]))
            .replace("__TIMEOUT_MS__", str(HOOK_TIMEOUT_SECONDS * 1000))
        )  # fmt: skip

    def uninstall(self, text: str) -> None:
        """Return None: the plugin file goes."""

    def installed(self, text: str | None) -> bool:
        """Tell whether the file is our plugin (its first line is our marker)."""
        return text is not None and text.split("\n", 1)[0] == MARKER

    def caveats(self, version: str | None) -> list[str]:
        """Say what the plugin leaves alone, and when it takes effect."""
        del version
        return [
            (
                "bash commands are not rewritten (OpenCode judges bash permissions "
                "and outside-directory access on the command text, after plugins): "
                "a cut output is read back whole from OpenCode's own output file"
            ),
            "OpenCode loads plugins once: restart it after install or uninstall",
            (
                "the TUI shows a tool's original output (metadata.output); the "
                "model sees the preview"
            ),
            "`!` shell commands typed in the prompt run without tool hooks",
            (
                "OpenCode adds package.json, node_modules and .gitignore to its "
                "config directories; they are OpenCode's, not spillvault's"
            ),
        ]

    # answering events -----------------------------------------------------------

    def no_op(self, event: str) -> str:  # noqa: ARG002 - the same for every event
        """Return `{}`: the plugin leaves the output as it was."""
        return NO_OP

    def session_for(
        self, payload: Mapping[str, Any], environ: Mapping[str, str]
    ) -> str:
        """Return the spillvault session of `input.sessionID`."""
        inner = payload.get("input")
        return super().session_for(inner if isinstance(inner, dict) else {}, environ)

    def respond(
        self, event: str, payload: Mapping[str, Any], context: HookContext
    ) -> str:
        """Gate a tool's output: the whole of it when OpenCode cut it."""
        inner = payload.get("input")
        output = payload.get("output")
        if (
            event != AFTER
            or not isinstance(inner, dict)
            or not isinstance(output, dict)
        ):
            return NO_OP
        tool = inner.get("tool")
        if not isinstance(tool, str):
            return NO_OP
        session = self.session_for(payload, context.environ)

        def gate(text: str) -> str | None:
            return context.gate(text, tool, session)

        if isinstance(output.get("output"), str):
            metadata = output.get("metadata")
            path = None
            if isinstance(metadata, dict) and metadata.get("truncated") is True:
                path = metadata.get("outputPath")
            shown = shown_instead(output["output"], full_output(path), gate)
            return NO_OP if shown is None else json.dumps({"output": shown})
        blocks = output.get("content")
        text = text_of(blocks)
        if text is None or not isinstance(blocks, list):
            return NO_OP
        shown = shown_instead(text, None, gate)
        if shown is None:
            return NO_OP
        others = [
            b for b in blocks if not (isinstance(b, dict) and b.get("type") == "text")
        ]
        return json.dumps({"content": [{"type": "text", "text": shown}, *others]})

    # the doctor -------------------------------------------------------------------

    def hook_commands(self, text: str) -> dict[str, str]:
        """Return the command line the plugin runs, from its SPILLVAULT constant."""
        if not self.installed(text):
            return {}
        match = _SPILLVAULT_LINE.search(text)
        try:
            spillvault = json.loads(match[1]) if match else None
        except ValueError:
            spillvault = None
        if not isinstance(spillvault, str):
            return {}
        return {AFTER: shlex.join(hook_command(spillvault, NAME, AFTER))}

    def shell_canary(self, command: str, cwd: str) -> dict[str, Any]:
        """Refuse: OpenCode's bash commands are not rewritten."""
        del command, cwd
        msg = "OpenCode's bash commands are not rewritten"
        raise NotImplementedError(msg)

    def output_canary(self, output: str, cwd: str) -> dict[str, Any]:
        """Return what the plugin sends after an MCP tool returned `output`."""
        del cwd
        tool_input = {
            "tool": "spillvault-doctor_echo",
            "sessionID": "ses_spillvault_doctor",
            "callID": "call_spillvault_doctor",
            "args": {},
        }
        content = [{"type": "text", "text": output}]
        return {"input": tool_input, "output": {"content": content}}

    def rewritten(self, stdout: str) -> str | None:  # noqa: ARG002 - never rewrites
        """Return None: no answer of this plugin rewrites a command."""
        return None

    def shown(self, stdout: str) -> str | None:
        """Return the text an answer shows: `output`, or its content's text."""
        answer = json_object(stdout)
        if answer is None:
            return None
        if isinstance(answer.get("output"), str):
            return str(answer["output"])
        return text_of(answer.get("content"))

    def check(self, event: str, stdout: str) -> list[str]:
        """Name what makes `stdout` an answer the plugin would not apply."""
        answer = json_object(stdout)
        if answer is None:
            return [
                "stdout is not a JSON object: the plugin leaves the output as it was"
            ]
        if event != AFTER:
            return [f"OpenCode's plugin runs no {event!r} hook"]
        problems = []
        if "output" in answer and not isinstance(answer["output"], str):
            problems.append("output is not a string")
        if "content" in answer and text_of(answer["content"]) is None:
            problems.append("content is not a list of content blocks")
        if "output" in answer and "content" in answer:
            problems.append("output and content both given: only one shape applies")
        return problems


CLIENT: Final = OpenCode()

__all__ = ["CLIENT", "OpenCode"]
