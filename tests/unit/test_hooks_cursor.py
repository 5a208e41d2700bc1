"""Cursor's hooks by contract: recorded inputs in, answers valid for Cursor.

The inputs follow cursor.com/docs/hooks (the preToolUse and postToolUse
examples, scraped copy of spring 2026 or later) and the stdin a static read
of the Cursor CLI bundle 2026.09.18-9a7762b found (`tool_input: {command,
cwd}`, `tool_output` a JSON string, the common fields). Cursor is closed
source: the output schemas below are written from the docs' field lists,
closed to other fields, since a permission hook's answer that Cursor cannot
read blocks the tool.
"""

from __future__ import annotations

import io
import json
import re
import shlex
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.client import HookConfigError, HookContext
from spillvault.adapters.hooks.cursor import CLIENT
from spillvault.adapters.hooks.entry import OUTPUT_LIMIT_CHARS, run_hook

if TYPE_CHECKING:
    from pathlib import Path

SPILLVAULT = "/opt/spillvault"
CONVERSATION = "5b0d6c1e-8a4f-4f1e-9d8e-2b7f1c3a9e10"
PRE_OUTPUT: dict[str, Any] = {  # docs: preToolUse output
    "type": "object",
    "properties": {
        "permission": {"enum": ["allow", "deny", "ask"]},
        "user_message": {"type": "string"},
        "agent_message": {"type": "string"},
        "updated_input": {"type": "object"},
    },
    "additionalProperties": False,
}
MCP_CONTENT: dict[str, Any] = {
    "type": "object",
    "required": ["content"],
    "properties": {
        "content": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
            },
        }
    },
}
POST_OUTPUT: dict[str, Any] = {  # docs: postToolUse output
    "type": "object",
    "properties": {
        "additional_context": {"type": "string"},
        "updated_mcp_tool_output": {"anyOf": [{"type": "string"}, MCP_CONTENT]},
    },
    "additionalProperties": False,
}
SCHEMAS = {"preToolUse": PRE_OUTPUT, "postToolUse": POST_OUTPUT}


def _common(event: str) -> dict[str, Any]:
    """The fields Cursor puts in every hook's stdin (CLI 2026.09.18)."""
    return {
        "conversation_id": CONVERSATION,
        "generation_id": "f2a9c0d4-1b7e-4c55-a0e2-6d3b8e71c4aa",
        "model": "composer-2.5",
        "session_id": CONVERSATION,
        "hook_event_name": event,
        "cursor_version": "2026.09.18-9a7762b",
        "workspace_roots": ["/Users/me/proj"],
        "user_email": "me@example.com",
        "transcript_path": None,
        "cwd": "/Users/me/proj",
        "tool_use_id": "call_9Qx\nctc_71b",
    }


def _pre(command: str, tool: str = "Shell", **tool_input: Any) -> dict[str, Any]:
    fields = {"command": command, "cwd": "/Users/me/proj", **tool_input}
    return {**_common("preToolUse"), "tool_name": tool, "tool_input": fields}


def _post(tool: str, output: object) -> dict[str, Any]:
    return {
        **_common("postToolUse"),
        "tool_name": tool,
        "tool_input": {"query": "select * from logs"},
        "tool_output": output if isinstance(output, str) else json.dumps(output),
        "duration": 48213,
    }


def _gate(text: str, tool: str, session: str) -> str | None:
    """A gate like the real one: over 30,000 characters, a preview with a handle."""
    assert session == f"cursor-{CONVERSATION}"
    if len(text) <= OUTPUT_LIMIT_CHARS:
        return None
    return f"[tool result stored as {session}/1; {tool}, {len(text)} chars]"


def _context(**environ: str) -> HookContext:
    env = {"HOME": "/Users/me", "SHELL": "/bin/zsh", **environ}
    return HookContext(spillvault=SPILLVAULT, environ=env, gate=_gate)


def _answer(event: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Answer an event: always one JSON object Cursor accepts."""
    text = CLIENT.respond(event, payload, _context())
    answer = json.loads(text)
    Draft202012Validator(SCHEMAS[event]).validate(answer)
    assert CLIENT.check(event, text) == []
    return answer


def test_a_shell_command_is_wrapped_with_no_permission_given() -> None:
    """updated_input keeps every field; Cursor's own approval still runs."""
    answer = _answer("preToolUse", _pre("npm test", working_directory="/Users/me"))
    assert list(answer) == ["updated_input"]
    updated = answer["updated_input"]
    assert {k: v for k, v in updated.items() if k != "command"} == {
        "cwd": "/Users/me/proj",
        "working_directory": "/Users/me",
    }
    assert shlex.split(updated["command"]) == [
        SPILLVAULT, "run", "--session", f"cursor-{CONVERSATION}", "--fail-open",
        "--", "zsh", "-lc", "npm test",
    ]  # fmt: skip
    assert CLIENT.rewritten(json.dumps(answer)) == updated["command"]


@pytest.mark.parametrize(
    "command",
    [
        "cd packages/web",
        "cat > .env <<'EOF'\nA=1\nEOF",
        "npm run dev &",
        "less server.log",
        "psql mydb",
        f"{SPILLVAULT} run --session cursor-x -- zsh -lc 'ls'",
    ],
)
def test_what_the_agents_shell_must_see_is_left_alone(command: str) -> None:
    """State changes, heredocs, background, interactive, already wrapped: `{}`."""
    assert _answer("preToolUse", _pre(command)) == {}


def test_other_tools_background_runs_and_other_shells_are_left_alone() -> None:
    """Read, a background Shell call, a PowerShell: `{}`."""
    read = {**_pre("x", tool="Read"), "tool_input": {"file_path": "/a"}}
    assert _answer("preToolUse", read) == {}
    assert _answer("preToolUse", _pre("npm run dev", is_background=True)) == {}
    powershell, bash = _pre("Get-ChildItem"), _pre("ls")
    powershell["tool_input"]["shell"] = "powershell"
    bash["tool_input"]["shell"] = "/bin/bash"
    assert _answer("preToolUse", powershell) == {}
    assert _answer("preToolUse", bash)["updated_input"]
    assert _answer("preToolUse", {**_pre("x"), "tool_input": "ls"}) == {}


def test_a_long_mcp_output_is_replaced_by_a_preview() -> None:
    """Over 30,000 characters: the text blocks become one preview; others stay."""
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    result = {
        "content": [
            {"type": "text", "text": "row\n" * 8_000},
            image,
            {"type": "text", "text": "end"},
        ],
        "isError": False,
    }
    answer = _answer("postToolUse", _post("MCP:query", result))
    replaced = answer["updated_mcp_tool_output"]
    preview = f"[tool result stored as cursor-{CONVERSATION}/1; MCP:query, 32004 chars]"
    assert replaced == {"content": [{"type": "text", "text": preview}, image]}
    assert CLIENT.shown(json.dumps(answer)) == preview


def test_a_short_mcp_output_or_a_builtin_tool_is_left_alone() -> None:
    """Under the limit, an error result, Shell output Cursor cannot replace: `{}`."""
    short = {"content": [{"type": "text", "text": "x" * 29_000}]}
    assert _answer("postToolUse", _post("MCP:query", short)) == {}
    error = {"content": [{"type": "text", "text": "x" * 40_000}], "isError": True}
    assert _answer("postToolUse", _post("MCP:query", error)) == {}
    shell = {"output": "x" * 40_000, "exitCode": 0}
    assert _answer("postToolUse", _post("Shell", shell)) == {}
    image = {"content": [{"type": "image", "data": "A" * 40_000}]}
    assert _answer("postToolUse", _post("MCP:shot", image)) == {}


def test_a_plain_text_mcp_output_is_the_text_itself() -> None:
    """Older builds sent the text, not JSON: it is gated as it is."""
    answer = _answer("postToolUse", _post("MCP:logs", "line\n" * 7_000))
    text = answer["updated_mcp_tool_output"]["content"][0]["text"]
    assert text.endswith("MCP:logs, 35000 chars]")


def test_the_hot_path_prints_one_object_for_every_event(tmp_path: Path) -> None:
    """Through `spillvault hook run cursor`, with the real gate: a handle or `{}`."""
    result = {"content": [{"type": "text", "text": "line of log output\n" * 3_000}]}
    for payload, replaced in ((_post("MCP:logs", result), True),
                              (_post("MCP:logs", {"content": []}), False)):  # fmt: skip
        out, err = io.StringIO(), io.StringIO()
        status = run_hook(
            "cursor", "postToolUse", stdin=io.StringIO(json.dumps(payload)),
            stdout=out, stderr=err, environ={"HOME": str(tmp_path)},
        )  # fmt: skip
        assert (status, err.getvalue()) == (0, "")
        answer = json.loads(out.getvalue())
        Draft202012Validator(POST_OUTPUT).validate(answer)
        shown = CLIENT.shown(out.getvalue())
        if replaced:
            assert shown is not None
            assert re.search(r"\[tool result stored as cursor-\S+/1;", shown)
            assert len(shown) <= OUTPUT_LIMIT_CHARS
        else:
            assert answer == {}


@pytest.mark.parametrize(
    ("event", "stdin"),
    [("preToolUse", "not json"), ("preToolUse", "[1]"), ("stop", "{}")],
)
def test_bad_input_fails_open_with_an_empty_object(event: str, stdin: str) -> None:
    """Never empty stdout (Cursor would block the tool): `{}`, a stderr line, 0."""
    out, err = io.StringIO(), io.StringIO()
    status = run_hook(
        "cursor", event, stdin=io.StringIO(stdin), stdout=out, stderr=err, environ={}
    )
    assert status == 0
    assert out.getvalue() == "{}\n"
    assert err.getvalue().startswith(f"spillvault hook cursor {event}: ")


def test_check_names_what_cursor_would_block_or_ignore() -> None:
    """Empty or text stdout blocks; unknown fields and bad shapes are named."""
    assert CLIENT.check("preToolUse", "") != []
    assert CLIENT.check("preToolUse", "ok") != []
    assert CLIENT.check("preToolUse", '{"updated_input": "ls"}') != []
    assert CLIENT.check("preToolUse", '{"decision": "allow"}') != []
    assert CLIENT.check("postToolUse", '{"updated_mcp_tool_output": 3}') != []
    assert CLIENT.check("postToolUse", '{"updated_mcp_tool_output": "ok"}') == []


def test_the_caveats_say_what_cursor_still_decides() -> None:
    """MCP only, Cursor's own approval, Claude Code's hooks, and old CLI builds."""
    current = CLIENT.caveats("2026.09.18-9a7762b")
    joined = " ".join(current)
    assert "MCP" in joined
    assert "approval" in joined
    assert "only this one acts" in joined
    old = CLIENT.caveats("2026.04.30-1a2b3c4")
    assert old[0].startswith("2026.04.30-1a2b3c4: ")
    assert old[1:] == current
    assert CLIENT.caveats("3.15.6") == current
    assert CLIENT.caveats(None) == current


# configuration ---------------------------------------------------------------------

FOREIGN = {"command": ".cursor/hooks/audit.sh", "matcher": "Shell"}
USER_FILE: dict[str, Any] = {
    "version": 1,
    "hooks": {
        "preToolUse": [FOREIGN],
        "afterFileEdit": [{"command": "./format.sh"}],
    },
}


def _plan_and_apply(path: Path, state: Path, *, installing: bool) -> bool:
    change = (
        install.plan_install(CLIENT, path, SPILLVAULT)
        if installing
        else install.plan_uninstall(CLIENT, path, state)
    )
    install.apply(change, state, installing=installing)
    return change.changes


def test_install_is_idempotent_and_uninstall_restores_the_bytes(tmp_path: Path) -> None:
    """Our two entries go after the user's; a second install changes nothing."""
    path, state = tmp_path / ".cursor" / "hooks.json", tmp_path / "state"
    path.parent.mkdir()
    original = json.dumps(USER_FILE) + "\n"
    path.write_text(original)
    assert _plan_and_apply(path, state, installing=True)
    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["hooks"]["afterFileEdit"] == USER_FILE["hooks"]["afterFileEdit"]
    assert data["hooks"]["preToolUse"] == [
        FOREIGN,
        {"command": f"{SPILLVAULT} hook run cursor preToolUse", "matcher": "Shell",
         "timeout": 30},
    ]  # fmt: skip
    assert data["hooks"]["postToolUse"] == [
        {"command": f"{SPILLVAULT} hook run cursor postToolUse", "matcher": "^MCP:",
         "timeout": 30},
    ]  # fmt: skip
    assert set(CLIENT.hook_commands(path.read_text())) == {"preToolUse", "postToolUse"}
    assert not install.plan_install(CLIENT, path, SPILLVAULT).changes
    assert _plan_and_apply(path, state, installing=False)
    assert path.read_text() == original


def test_a_new_file_gets_a_version_and_goes_again(tmp_path: Path) -> None:
    """No hooks.json before: `version: 1` and ours; uninstall deletes it."""
    path, state = tmp_path / ".cursor" / "hooks.json", tmp_path / "state"
    assert _plan_and_apply(path, state, installing=True)
    data = json.loads(path.read_text())
    assert list(data) == ["version", "hooks"]
    assert data["version"] == 1
    assert _plan_and_apply(path, state, installing=False)
    assert not path.exists()


def test_after_the_user_edits_uninstall_takes_only_ours(tmp_path: Path) -> None:
    """Entries the user added since, in our events too, all stay."""
    path, state = tmp_path / "hooks.json", tmp_path / "state"
    path.write_text(json.dumps(USER_FILE))
    _plan_and_apply(path, state, installing=True)
    data = json.loads(path.read_text())
    theirs = {"command": "./redact.sh", "matcher": "^MCP:"}
    data["hooks"]["postToolUse"].insert(0, theirs)
    data["hooks"]["stop"] = [{"command": "./notify.sh"}]
    path.write_text(json.dumps(data, indent=2))
    assert _plan_and_apply(path, state, installing=False)
    after = json.loads(path.read_text())
    assert after == {
        "version": 1,
        "hooks": {
            "preToolUse": [FOREIGN],
            "afterFileEdit": [{"command": "./format.sh"}],
            "postToolUse": [theirs],
            "stop": [{"command": "./notify.sh"}],
        },
    }


def test_a_file_without_a_version_gains_one() -> None:
    """The CLI skips a hooks.json with no version; install adds `version: 1`."""
    text = json.dumps({"hooks": {"stop": [{"command": "./notify.sh"}]}})
    installed = json.loads(CLIENT.install(text, [SPILLVAULT]))
    assert installed["version"] == 1
    assert installed["hooks"]["stop"] == [{"command": "./notify.sh"}]
    assert json.loads(CLIENT.uninstall(json.dumps(installed))) == {
        "version": 1,
        "hooks": {"stop": [{"command": "./notify.sh"}]},
    }


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not valid JSON"),
        ('"hooks"', "does not hold a JSON object"),
        ('{"version": 1, "hooks": []}', "is not an object"),
        ('{"version": "1", "hooks": {}}', "version '1' is not a positive integer"),
        ('{"version": 0}', "version 0 is not a positive integer"),
    ],
)
def test_a_file_cursor_could_not_read_is_refused_and_left_alone(
    tmp_path: Path, text: str, why: str
) -> None:
    """Nothing is written into a file that is not Cursor's hooks.json shape."""
    path = tmp_path / "hooks.json"
    path.write_text(text)
    with pytest.raises(HookConfigError, match=re.escape(why)):
        install.plan_install(CLIENT, path, SPILLVAULT)
    assert path.read_text() == text
    assert not (tmp_path / "hooks.json.spillvault.bak").exists()


# every settings file: uninstall(install(x)) is x ------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_entry = st.fixed_dictionaries(
    {"command": _text},
    optional={
        "matcher": _text,
        "timeout": st.integers(1, 600),
        "failClosed": st.just(False),
    },
)
_events = st.sampled_from(
    ["preToolUse", "postToolUse", "beforeShellExecution", "afterFileEdit", "stop"]
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3)
    ),
    max_leaves=6,
)
_settings = st.fixed_dictionaries(
    {"version": st.integers(1, 3)},
    optional={"hooks": st.dictionaries(_events, st.lists(_entry, max_size=3))},
).flatmap(
    lambda fixed: st.dictionaries(
        _text.filter(lambda key: key not in {"version", "hooks"}), _json, max_size=2
    ).map(lambda extra: {**fixed, **extra})
)


def _pruned(data: dict[str, Any]) -> dict[str, Any]:
    """Drop empty event lists and an empty `hooks`: what uninstall cannot tell apart."""
    hooks = {e: entries for e, entries in data.get("hooks", {}).items() if entries}
    rest = {key: value for key, value in data.items() if key != "hooks"}
    return {**rest, "hooks": hooks} if hooks else rest


@given(settings=_settings, spillvault=st.sampled_from([SPILLVAULT, "/a b/spillvault"]))
def test_uninstall_undoes_install(settings: dict[str, Any], spillvault: str) -> None:
    """Foreign entries and keys survive a round trip; installing twice is installing."""
    text = json.dumps(settings)
    assume(not CLIENT.installed(text))
    installed = CLIENT.install(
        text, [spillvault, "hook", "run", "cursor", "preToolUse"]
    )
    assert set(CLIENT.hook_commands(installed)) == {"preToolUse", "postToolUse"}
    assert CLIENT.install(installed, [spillvault]) == installed
    back = json.loads(CLIENT.uninstall(installed))
    assert _pruned(back) == _pruned(settings)
    if _pruned(settings) == settings:
        assert back == settings
