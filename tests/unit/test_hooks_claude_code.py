"""Claude Code's hooks by contract: recorded inputs in, answers valid for Claude Code.

The inputs follow the documented shapes (code.claude.com/docs/en/hooks, as
mirrored at ericbuess/claude-code-docs@ec68a5b, 2026-08-22, Claude Code
2.1.240: the PreToolUse Bash example, the SDK's BashOutput/FileReadOutput/
GrepOutput/WebFetchOutput types). Claude Code is closed source: the output
schema below is written from the same page's field tables.
"""

from __future__ import annotations

import io
import json
import shlex
from typing import TYPE_CHECKING, Any

import pytest
from jsonschema import Draft202012Validator

from spillvault.adapters.hooks.claude_code import CLIENT
from spillvault.adapters.hooks.client import HookContext
from spillvault.adapters.hooks.entry import run_hook

if TYPE_CHECKING:
    from pathlib import Path

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "hookSpecificOutput": {
            "type": "object",
            "required": ["hookEventName"],
            "properties": {
                "hookEventName": {"enum": ["PreToolUse", "PostToolUse"]},
                "permissionDecision": {"enum": ["allow", "deny", "ask", "defer"]},
                "permissionDecisionReason": {"type": "string"},
                "updatedInput": {"type": "object"},
                "updatedToolOutput": {},
                "additionalContext": {"type": "string"},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
BASH_OUTPUT = {  # the SDK's BashOutput: what updatedToolOutput must look like for Bash
    "type": "object",
    "required": ["stdout", "stderr", "interrupted"],
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "interrupted": {"type": "boolean"},
        "isImage": {"type": "boolean"},
    },
}
STORED = "[tool result stored as claude-s1/1; …]"


def _pre(command: str, **extra: Any) -> dict[str, Any]:
    tool_input = {"command": command, "description": "Run it", "timeout": 120000}
    return {
        "session_id": "abc123",
        "transcript_path": "/home/u/.claude/projects/x/abc123.jsonl",
        "cwd": "/home/u/proj",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {**tool_input, "run_in_background": False},
        "tool_use_id": "toolu_01ABC",
        **extra,
    }


def _post(tool: str, response: object) -> dict[str, Any]:
    return {
        "session_id": "abc123",
        "cwd": "/home/u/proj",
        "permission_mode": "default",
        "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_input": {},
        "tool_response": response,
        "tool_use_id": "toolu_01ABC",
        "duration_ms": 12,
    }


def _context(home: Path, gate: Any = None, **environ: str) -> HookContext:
    env = {"HOME": str(home), "SHELL": "/bin/bash", **environ}
    return HookContext(
        spillvault="/opt/bin/spillvault", environ=env, gate=gate or (lambda *_: None)
    )


def _answer(
    event: str, payload: dict[str, Any], context: HookContext
) -> dict[str, Any]:
    text = CLIENT.respond(event, payload, context)
    answer = json.loads(text)
    Draft202012Validator(OUTPUT_SCHEMA).validate(answer)
    assert CLIENT.check(event, text) == []
    return answer


def test_a_bash_command_is_wrapped_with_every_input_field_kept(tmp_path: Path) -> None:
    """updatedInput replaces the input whole: every field stays, the command wraps."""
    answer = _answer("PreToolUse", _pre("pytest -x"), _context(tmp_path))
    output = answer["hookSpecificOutput"]
    updated = output["updatedInput"]
    assert set(updated) == {"command", "description", "timeout", "run_in_background"}
    assert shlex.split(updated["command"]) == [
        "/opt/bin/spillvault", "run", "--session", "claude-abc123", "--fail-open",
        "--", "bash", "-lc", "pytest -x",
    ]  # fmt: skip
    assert "permissionDecision" not in output  # the user's permission flow runs


@pytest.mark.parametrize(
    "command", ["cd src", "export A=1", "vim x", "sleep 9 &", "cat <<EOF\nx\nEOF"]
)
def test_what_the_agents_shell_must_see_is_left_alone(
    tmp_path: Path, command: str
) -> None:
    """State changes, editors, background runs and heredocs: `{}`, no opinion."""
    assert _answer("PreToolUse", _pre(command), _context(tmp_path)) == {}


def test_background_runs_and_other_tools_are_left_alone(tmp_path: Path) -> None:
    """`run_in_background` and non-Bash tools pass."""
    background = _pre("npm run dev")
    background["tool_input"]["run_in_background"] = True
    assert _answer("PreToolUse", background, _context(tmp_path)) == {}
    other = {**_pre("x"), "tool_name": "Read", "tool_input": {"file_path": "/a"}}
    assert _answer("PreToolUse", other, _context(tmp_path)) == {}


def _settings(home: Path, permissions: dict[str, list[str]]) -> None:
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"permissions": permissions})
    )


def test_the_users_rules_decide_on_the_command_as_written(tmp_path: Path) -> None:
    """Allow rule: wrapped and allowed; deny or ask rule: left alone; no rule: asked."""
    rules = {
        "allow": ["Bash(npm test:*)", "Bash(git status)"],
        "deny": ["Bash(rm:*)"],
        "ask": ["Bash(git push:*)"],
    }
    _settings(tmp_path, rules)
    context = _context(tmp_path)
    allowed = _answer("PreToolUse", _pre("npm test -- --watch=false"), context)
    assert allowed["hookSpecificOutput"]["permissionDecision"] == "allow"
    both = _answer("PreToolUse", _pre("git status && npm test"), context)
    assert both["hookSpecificOutput"]["permissionDecision"] == "allow"
    partly = _answer("PreToolUse", _pre("git status && make"), context)
    assert "permissionDecision" not in partly["hookSpecificOutput"]
    assert _answer("PreToolUse", _pre("rm -rf build"), context) == {}
    assert _answer("PreToolUse", _pre("make && git push origin"), context) == {}


def test_modes_that_decide_unasked_keep_unruled_commands_as_written(
    tmp_path: Path,
) -> None:
    """dontAsk and auto judge the command; a wrapper would be judged instead."""
    for mode in ("dontAsk", "auto"):
        payload = _pre("make", permission_mode=mode)
        assert _answer("PreToolUse", payload, _context(tmp_path)) == {}


def test_inside_cursor_the_claude_hook_does_nothing(tmp_path: Path) -> None:
    """Cursor runs Claude Code's hooks too: only the Cursor hook acts there."""
    context = _context(tmp_path, CURSOR_VERSION="2026.09.18-9a7762b")
    assert _answer("PreToolUse", _pre("make"), context) == {}
    marked = _pre("make", conversation_id="c1")
    assert _answer("PreToolUse", marked, _context(tmp_path)) == {}


def _gate(text: str, tool: str, session: str) -> str | None:
    assert session == "claude-abc123"
    return f"{STORED} {tool} {len(text)}" if len(text) > 100 else None


@pytest.mark.parametrize(
    ("tool", "response", "where"),
    [
        ("Bash", {"stdout": "x" * 500, "stderr": "", "interrupted": False,
                  "isImage": False}, ("stdout",)),
        ("Read", {"type": "text", "file": {"filePath": "/a", "content": "y" * 500,
                  "numLines": 1, "startLine": 1, "totalLines": 1}},
         ("file", "content")),
        ("Grep", {"mode": "content", "numFiles": 3, "filenames": [],
                  "content": "z" * 500, "numLines": 9}, ("content",)),
        ("WebFetch", {"bytes": 500, "code": 200, "codeText": "OK",
                      "result": "w" * 500, "durationMs": 5, "url": "https://x"},
         ("result",)),
    ],
)  # fmt: skip
def test_a_long_output_is_replaced_in_the_tools_own_shape(
    tmp_path: Path, tool: str, response: dict[str, Any], where: tuple[str, ...]
) -> None:
    """Only the text changes; every other field stays as the tool gave it."""
    answer = _answer("PostToolUse", _post(tool, response), _context(tmp_path, _gate))
    replaced = answer["hookSpecificOutput"]["updatedToolOutput"]
    holder, original = replaced, response
    for key in where[:-1]:
        holder, original = holder[key], original[key]
    assert holder[where[-1]] == f"{STORED} {tool} 500"
    assert {k: v for k, v in holder.items() if k != where[-1]} == {
        k: v for k, v in original.items() if k != where[-1]
    }
    if tool == "Bash":
        Draft202012Validator(BASH_OUTPUT).validate(replaced)


def test_an_mcp_output_keeps_its_other_blocks(tmp_path: Path) -> None:
    """MCP text blocks become one preview; an image block stays."""
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    response = [
        {"type": "text", "text": "a" * 300},
        image,
        {"type": "text", "text": "b"},
    ]
    answer = _answer(
        "PostToolUse", _post("mcp__fs__read", response), _context(tmp_path, _gate)
    )
    replaced = answer["hookSpecificOutput"]["updatedToolOutput"]
    assert replaced == [{"type": "text", "text": f"{STORED} mcp__fs__read 302"}, image]


def test_a_short_output_or_another_tool_is_left_alone(tmp_path: Path) -> None:
    """Under the limit, or a tool with no text to replace: `{}`."""
    short = _post("Bash", {"stdout": "ok", "stderr": "", "interrupted": False})
    assert _answer("PostToolUse", short, _context(tmp_path, _gate)) == {}
    image = _post("Read", {"type": "image", "file": {"base64": "AAAA"}})
    assert _answer("PostToolUse", image, _context(tmp_path, _gate)) == {}


@pytest.mark.parametrize("stdin", ["not json", "[1, 2]", ""])
def test_bad_input_fails_open(stdin: str) -> None:
    """Any error: the no-op answer, one line on stderr, exit 0."""
    out, err = io.StringIO(), io.StringIO()
    status = run_hook(
        "claude-code", "PreToolUse", stdin=io.StringIO(stdin), stdout=out, stderr=err,
        environ={"HOME": "/nonexistent"},
    )  # fmt: skip
    assert status == 0
    assert out.getvalue() == "{}\n"
    if stdin:
        assert err.getvalue().startswith("spillvault hook claude-code PreToolUse: ")


def test_an_unknown_client_or_event_fails_open_too() -> None:
    """A stale configuration never blocks a tool."""
    for client, event in (("nope", "PreToolUse"), ("claude-code", "Stop")):
        out, err = io.StringIO(), io.StringIO()
        status = run_hook(
            client, event, stdin=io.StringIO("{}"), stdout=out, stderr=err, environ={}
        )
        assert status == 0
        assert out.getvalue() == "{}\n"
        assert err.getvalue()


def test_a_spillvault_read_in_bash_is_never_stored_again(tmp_path: Path) -> None:
    """Paging a handle back through Bash must not spill the page: no loop."""
    payload = _post("Bash", {"stdout": "x" * 500, "stderr": "", "interrupted": False})
    payload["tool_input"] = {"command": "spillvault read claude-s1/1 --line 400"}
    assert _answer("PostToolUse", payload, _context(tmp_path, _gate)) == {}


def test_a_preview_is_never_stored_again() -> None:
    """A wrapped command's preview may pass the limit a little: it stays as it is."""
    from spillvault.adapters.hooks.entry import _gate  # noqa: PLC0415

    preview = "[tool result stored as claude-s1/1; tool: bash]\n" + "x" * 29_950
    assert _gate(preview, "Bash", "claude-s1") is None
