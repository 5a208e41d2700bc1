"""Codex's hooks by contract: recorded inputs in, answers Codex's own schema accepts.

The schemas are Codex's: `codex-rs/hooks/schema/generated/pre-tool-use.
command.{input,output}.schema.json` (openai/codex@3be4afd35fc4, from the
public index), with what codex-cli 0.144.1 embeds on top of them (a spike
that read the schemas out of the 0.144.1 binary: `turn_id`, `agent_id`,
`agent_type` in the input, the legacy `decision`/`reason` in the output,
`hookEventName` a const). The rules a schema cannot say (updatedInput only
with "allow", ...) are `output_parser.rs::parse_pre_tool_use`
(openai/codex@0ea83813): `CLIENT.check` holds them and is asserted empty.
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
from jsonschema import Draft7Validator

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.client import HookConfigError, HookContext
from spillvault.adapters.hooks.codex import CLIENT, hooks_enabled, trust_state
from spillvault.adapters.hooks.entry import run_hook

if TYPE_CHECKING:
    from pathlib import Path

SPILLVAULT = "/opt/spillvault"
SESSION = "019a6b5e-3c1d-7f20-9e4b-5a2f8c1d0e77"
INPUT_SCHEMA: dict[str, Any] = {  # pre-tool-use.command.input, codex-cli 0.144.1
    "$schema": "http://json-schema.org/draft-07/schema#",
    "additionalProperties": False,
    "definitions": {"NullableString": {"type": ["string", "null"]}},
    "properties": {
        "agent_id": {"type": "string"},
        "agent_type": {"type": "string"},
        "cwd": {"type": "string"},
        "hook_event_name": {"const": "PreToolUse", "type": "string"},
        "model": {"type": "string"},
        "permission_mode": {
            "enum": ["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"],
            "type": "string",
        },
        "session_id": {"type": "string"},
        "tool_input": True,
        "tool_name": {"type": "string"},
        "tool_use_id": {"type": "string"},
        "transcript_path": {"$ref": "#/definitions/NullableString"},
        "turn_id": {"type": "string"},
    },
    "required": [
        "cwd", "hook_event_name", "model", "permission_mode", "session_id",
        "tool_input", "tool_name", "tool_use_id", "transcript_path", "turn_id",
    ],
    "title": "pre-tool-use.command.input",
    "type": "object",
}  # fmt: skip
BASH_INPUT_SCHEMA: dict[str, Any] = {  # PreToolUseToolInput, openai/codex@3be4afd
    "additionalProperties": False,
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
    "type": "object",
}
OUTPUT_SCHEMA: dict[str, Any] = {  # pre-tool-use.command.output
    "$schema": "http://json-schema.org/draft-07/schema#",
    "additionalProperties": False,
    "definitions": {
        "PreToolUseDecisionWire": {"enum": ["approve", "block"], "type": "string"},
        "PreToolUseHookSpecificOutputWire": {
            "additionalProperties": False,
            "properties": {
                "additionalContext": {"default": None, "type": "string"},
                "hookEventName": {"const": "PreToolUse", "type": "string"},
                "permissionDecision": {
                    "allOf": [
                        {"$ref": "#/definitions/PreToolUsePermissionDecisionWire"}
                    ],
                    "default": None,
                },
                "permissionDecisionReason": {"default": None, "type": "string"},
                "updatedInput": {"default": None},
            },
            "required": ["hookEventName"],
            "type": "object",
        },
        "PreToolUsePermissionDecisionWire": {
            "enum": ["allow", "deny", "ask"],
            "type": "string",
        },
    },
    "properties": {
        "continue": {"default": True, "type": "boolean"},
        "decision": {
            "allOf": [{"$ref": "#/definitions/PreToolUseDecisionWire"}],
            "default": None,
        },
        "hookSpecificOutput": {
            "allOf": [{"$ref": "#/definitions/PreToolUseHookSpecificOutputWire"}],
            "default": None,
        },
        "reason": {"default": None, "type": "string"},
        "stopReason": {"default": None, "type": "string"},
        "suppressOutput": {"default": False, "type": "boolean"},
        "systemMessage": {"default": None, "type": "string"},
    },
    "title": "pre-tool-use.command.output",
    "type": "object",
}


def _pre(command: str, tool: str = "Bash", **tool_input: Any) -> dict[str, Any]:
    """A PreToolUse stdin as `pre_tool_use.rs::command_input_json` builds it."""
    payload = {
        "session_id": SESSION,
        "turn_id": "019a6b5e-4000-7000-8000-000000000001",
        "transcript_path": "/home/u/.codex/sessions/2026/12/02/rollout-x.jsonl",
        "cwd": "/home/u/proj",
        "hook_event_name": "PreToolUse",
        "model": "gpt-5.5-codex",
        "permission_mode": "default",
        "tool_name": tool,
        "tool_use_id": "call_Jx8k2",
        "tool_input": {"command": command, **tool_input},
    }
    Draft7Validator(INPUT_SCHEMA).validate(payload)
    return payload


def _context(**environ: str) -> HookContext:
    env = {"HOME": "/home/u", "SHELL": "/bin/bash", **environ}
    return HookContext(spillvault=SPILLVAULT, environ=env, gate=lambda *_: None)


def _answer(payload: dict[str, Any], context: HookContext | None = None) -> str:
    """Answer PreToolUse; every answer must pass Codex's schema and parser rules."""
    text = CLIENT.respond("PreToolUse", payload, context or _context())
    assert CLIENT.check("PreToolUse", text) == []
    if text:
        Draft7Validator(OUTPUT_SCHEMA).validate(json.loads(text))
    return text


def test_a_bash_command_is_wrapped_in_the_one_form_codex_applies() -> None:
    """allow + updatedInput, the command wrapped, nothing else in the answer."""
    text = _answer(_pre("pytest -x 2>&1 | tail -50"))
    output = json.loads(text)["hookSpecificOutput"]
    assert set(output) == {"hookEventName", "permissionDecision", "updatedInput"}
    assert output["permissionDecision"] == "allow"
    updated = output["updatedInput"]
    Draft7Validator(BASH_INPUT_SCHEMA).validate(updated)
    assert shlex.split(updated["command"]) == [
        SPILLVAULT, "run", "--session", f"codex-{SESSION}", "--fail-open", "--",
        "bash", "-lc", "pytest -x 2>&1 | tail -50",
    ]  # fmt: skip
    assert CLIENT.rewritten(text) == updated["command"]
    assert CLIENT.shown(text) is None


def test_every_input_field_is_copied_and_the_users_shell_runs_it() -> None:
    """Newer builds' extra fields (unverified) come back; zsh users get zsh."""
    payload = _pre("ls -la", kind="argv", program="ls", args=["-la"])
    text = _answer(payload, _context(SHELL="/usr/bin/zsh"))
    updated = json.loads(text)["hookSpecificOutput"]["updatedInput"]
    assert {k: v for k, v in updated.items() if k != "command"} == {
        "kind": "argv",
        "program": "ls",
        "args": ["-la"],
    }
    assert shlex.split(updated["command"])[-3:] == ["zsh", "-lc", "ls -la"]


@pytest.mark.parametrize(
    "command",
    [
        "cd src && make",
        "cat <<EOF > notes.txt\nhello\nEOF",
        "npm run dev &",
        "vim README.md",
        "git rebase -i HEAD~3",
        "python3",
        f"{SPILLVAULT} run --session codex-x -- bash -lc 'make'",
        "   ",
    ],
)
def test_what_the_agents_shell_must_see_is_left_alone(command: str) -> None:
    """State changes, heredocs, background, interactive, already wrapped: no opinion."""
    assert _answer(_pre(command)) == ""


def test_other_tools_and_shapes_are_left_alone() -> None:
    """apply_patch, MCP tools, a PowerShell script, an input with no command."""
    assert _answer(_pre("*** Begin Patch", tool="apply_patch")) == ""
    mcp = {**_pre("x", tool="mcp__fs__read_file"), "tool_input": {"path": "/a"}}
    assert _answer(mcp) == ""
    assert _answer(_pre("Get-ChildItem", kind="powershell_script")) == ""
    assert _answer({**_pre("x"), "tool_input": "ls"}) == ""
    assert CLIENT.respond("PostToolUse", _pre("make"), _context()) == ""


def test_the_hot_path_answers_from_stdin() -> None:
    """`spillvault hook run codex PreToolUse`: JSON in, the answer out, exit 0."""
    out, err = io.StringIO(), io.StringIO()
    status = run_hook(
        "codex", "PreToolUse", stdin=io.StringIO(json.dumps(_pre("make test"))),
        stdout=out, stderr=err, environ={"SHELL": "/bin/bash", "PATH": "/nonexistent"},
    )  # fmt: skip
    assert (status, err.getvalue()) == (0, "")
    answer = json.loads(out.getvalue())
    Draft7Validator(OUTPUT_SCHEMA).validate(answer)
    command = answer["hookSpecificOutput"]["updatedInput"]["command"]
    assert shlex.split(command)[-3:] == ["bash", "-lc", "make test"]


@pytest.mark.parametrize(
    ("event", "stdin"),
    [("PreToolUse", "not json"), ("PreToolUse", "[1, 2]"), ("PostToolUse", "{}")],
)
def test_bad_input_fails_open_with_empty_stdout(event: str, stdin: str) -> None:
    """Any error, or an event we never install: empty stdout, one stderr line, 0."""
    out, err = io.StringIO(), io.StringIO()
    status = run_hook(
        "codex", event, stdin=io.StringIO(stdin), stdout=out, stderr=err, environ={}
    )
    assert status == 0
    assert out.getvalue() == ""
    assert err.getvalue().startswith(f"spillvault hook codex {event}: ")
    assert err.getvalue().count("\n") == 1


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                 "updatedInput": {"command": "x"}}},
         "without permissionDecision: allow"),
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                 "permissionDecision": "allow"}},
         "allow without updatedInput"),
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                 "permissionDecision": "ask"}}, "ask"),
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                 "permissionDecision": "deny"}},
         "needs a permissionDecisionReason"),
        ({"decision": "allow", "reason": "x"}, "decision: 'allow' is unsupported"),
        ({"decision": "block"}, "needs a reason"),
        ({"continue": False}, "continue: false"),
        ({"extra": 1}, "unknown field"),
        ({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                 "updatedToolOutput": "x"}}, "unknown field"),
        ({"hookSpecificOutput": {"hookEventName": "PostToolUse"}}, "hookEventName"),
    ],
)  # fmt: skip
def test_check_names_what_codex_would_reject(
    answer: dict[str, Any], problem: str
) -> None:
    """The doctor's check holds the parser's rules, not only the schema's."""
    problems = CLIENT.check("PreToolUse", json.dumps(answer))
    assert any(problem in found for found in problems), problems
    assert CLIENT.check("PreToolUse", "") == []
    assert CLIENT.check("PreToolUse", "{oops") != []


def test_the_caveats_always_name_the_trust_gate() -> None:
    """Trust is asked of every version; 0.130 is told its rewrites are refused."""
    current = CLIENT.caveats("codex-cli 0.171.0")
    assert any("/hooks" in note and "trusted_hash" in note for note in current)
    assert not any("0.131.0" in note for note in current)
    old = CLIENT.caveats("codex-cli 0.130.0")
    assert old[0].startswith("codex-cli 0.130.0: ")
    assert "need codex-cli 0.131.0" in old[0]
    assert old[1:] == current
    assert CLIENT.caveats(None) == current


# trust ------------------------------------------------------------------------------

FOREIGN_GROUP = {
    "matcher": "^Bash$",
    "hooks": [{"type": "command", "command": "/usr/local/bin/rtk hook codex"}],
}


def _installed_text(*before: dict[str, Any]) -> str:
    text = json.dumps({"hooks": {"PreToolUse": list(before)}})
    return CLIENT.install(text, [SPILLVAULT, "hook", "run", "codex", "PreToolUse"])


def test_trust_is_read_at_our_groups_key_never_computed(tmp_path: Path) -> None:
    """`<path>:pre_tool_use:<group>:<handler>` with a trusted_hash: True."""
    path = tmp_path / ".codex" / "hooks.json"
    hooks_text = _installed_text(FOREIGN_GROUP)  # ours is group 1
    key = f"{path}:pre_tool_use:1:0"

    def state(toml: str | None) -> bool | None:
        return trust_state(toml, path, hooks_text=hooks_text)

    assert state(f'[hooks.state."{key}"]\ntrusted_hash = "sha256:abc"\n') is True
    assert (
        state(f'[hooks.state."{path}:pre_tool_use:0:0"]\ntrusted_hash = "x"\n') is False
    )
    assert (
        state(f'[hooks.state."{key}"]\nenabled = false\ntrusted_hash = "x"\n') is False
    )
    assert state('model = "gpt-5.5"\n') is False
    assert state(None) is False
    assert state("[hooks.state\nbroken") is None
    assert trust_state("", path, hooks_text='{"hooks": {}}') is None
    assert trust_state("", tmp_path / "missing.json") is None
    path.parent.mkdir()
    path.write_text(hooks_text)
    assert trust_state(f'[hooks.state."{key}"]\ntrusted_hash = "h"\n', path) is True


def test_hooks_can_be_switched_off_in_config_toml() -> None:
    """`[features] hooks = false` (or the older codex_hooks) turns every hook off."""
    assert hooks_enabled(None) is True
    assert hooks_enabled("[features]\nhooks = true\n") is True
    assert hooks_enabled("[features]\nhooks = false\n") is False
    assert hooks_enabled("[features]\ncodex_hooks = false\n") is False
    assert hooks_enabled("[features\n") is None


# configuration ---------------------------------------------------------------------

USER_FILE: dict[str, Any] = {
    "description": "my hooks",
    "hooks": {
        "SessionStart": [
            {"hooks": [{"type": "command", "command": "~/bin/greet", "timeout": 5}]}
        ],
        "PreToolUse": [FOREIGN_GROUP],
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
    """Ours goes last after the user's groups; a second install changes nothing."""
    path, state = tmp_path / ".codex" / "hooks.json", tmp_path / "state"
    path.parent.mkdir()
    original = json.dumps(USER_FILE, indent=4) + "\n"
    path.write_text(original)
    assert _plan_and_apply(path, state, installing=True)
    data = json.loads(path.read_text())
    assert data["description"] == "my hooks"
    assert data["hooks"]["SessionStart"] == USER_FILE["hooks"]["SessionStart"]
    assert data["hooks"]["PreToolUse"][0] == FOREIGN_GROUP
    ours = data["hooks"]["PreToolUse"][1]
    assert ours["matcher"] == "^Bash$"
    assert ours["hooks"] == [{
        "type": "command",
        "command": f"{SPILLVAULT} hook run codex PreToolUse",
        "timeout": 30,
    }]  # fmt: skip
    assert set(data) == {"description", "hooks"}  # never a $schema
    assert CLIENT.hook_commands(path.read_text()) == {
        "PreToolUse": f"{SPILLVAULT} hook run codex PreToolUse"
    }
    assert not install.plan_install(CLIENT, path, SPILLVAULT).changes
    assert _plan_and_apply(path, state, installing=False)
    assert path.read_text() == original


def test_a_new_file_is_ours_and_goes_again(tmp_path: Path) -> None:
    """No hooks.json before: install writes one, uninstall deletes it."""
    path, state = tmp_path / ".codex" / "hooks.json", tmp_path / "state"
    assert _plan_and_apply(path, state, installing=True)
    assert json.loads(path.read_text())["hooks"]["PreToolUse"][0]["matcher"] == "^Bash$"
    assert _plan_and_apply(path, state, installing=False)
    assert not path.exists()


def test_after_the_user_edits_uninstall_takes_only_ours(tmp_path: Path) -> None:
    """A group added after ours, a handler added into ours: both stay."""
    path, state = tmp_path / "hooks.json", tmp_path / "state"
    path.write_text(json.dumps(USER_FILE))
    _plan_and_apply(path, state, installing=True)
    data = json.loads(path.read_text())
    mine = {"type": "command", "command": "~/bin/audit"}
    data["hooks"]["PreToolUse"][1]["hooks"].append(mine)
    data["hooks"]["PreToolUse"].append({"matcher": "apply_patch", "hooks": [mine]})
    data["hooks"]["Stop"] = [{"hooks": [mine]}]
    path.write_text(json.dumps(data, indent=2))
    assert _plan_and_apply(path, state, installing=False)
    after = json.loads(path.read_text())
    assert after["hooks"]["PreToolUse"] == [
        FOREIGN_GROUP,
        {"matcher": "^Bash$", "hooks": [mine]},
        {"matcher": "apply_patch", "hooks": [mine]},
    ]
    assert after["hooks"]["Stop"] == [{"hooks": [mine]}]
    assert after["hooks"]["SessionStart"] == USER_FILE["hooks"]["SessionStart"]
    assert not CLIENT.installed(path.read_text())


def test_a_reinstall_keeps_our_group_where_it_stood() -> None:
    """Trust is keyed by the group's index: a new path replaces ours in place."""
    later = {"matcher": "^Bash$", "hooks": [{"type": "command", "command": "later"}]}
    first = json.loads(_installed_text(FOREIGN_GROUP))
    first["hooks"]["PreToolUse"].append(later)
    moved = CLIENT.install(
        json.dumps(first), ["/usr/bin/spillvault", "hook", "run", "codex", "PreToolUse"]
    )
    groups = json.loads(moved)["hooks"]["PreToolUse"]
    assert groups[0] == FOREIGN_GROUP
    assert groups[2] == later
    assert (
        groups[1]["hooks"][0]["command"]
        == "/usr/bin/spillvault hook run codex PreToolUse"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "does not hold a JSON object"),
        ('{"hooks": {"PreToolUse": {}}}', "is not a list"),
        ('{"$schema": "https://x/codex-hooks.json", "hooks": {}}', "$schema"),
        ('{"hooks": {}, "version": 1}', "root keys Codex refuses (version)"),
    ],
)
def test_a_file_codex_could_not_read_is_refused_and_left_alone(
    tmp_path: Path, text: str, why: str
) -> None:
    """Nothing is written into a file that is not Codex's hooks.json shape."""
    path = tmp_path / "hooks.json"
    path.write_text(text)
    with pytest.raises(HookConfigError, match=re.escape(why)):
        install.plan_install(CLIENT, path, SPILLVAULT)
    assert path.read_text() == text
    assert not (tmp_path / "hooks.json.spillvault.bak").exists()


def test_an_unknown_root_key_does_not_stop_an_uninstall() -> None:
    """A key the user added after install: ours still comes out, theirs stays."""
    data = json.loads(_installed_text())
    data["$schema"] = "https://example.com/x.json"
    left = json.loads(CLIENT.uninstall(json.dumps(data)))
    assert left == {"$schema": "https://example.com/x.json"}


# every settings file: uninstall(install(x)) is x ------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_handler = st.fixed_dictionaries(
    {"type": st.just("command"), "command": _text},
    optional={"timeout": st.integers(1, 600), "statusMessage": _text},
)
_group = st.fixed_dictionaries(
    {"hooks": st.lists(_handler, max_size=3)},
    optional={"matcher": st.one_of(st.none(), _text)},
)
_events = st.sampled_from(
    ["PreToolUse", "PostToolUse", "PermissionRequest", "SessionStart", "Stop"]
)
_settings = st.fixed_dictionaries(
    {},
    optional={
        "hooks": st.dictionaries(_events, st.lists(_group, max_size=3)),
        "description": _text,
    },
)


def _pruned(data: dict[str, Any]) -> dict[str, Any]:
    """Drop empty event lists and an empty `hooks`: what uninstall cannot tell apart."""
    hooks = {e: groups for e, groups in data.get("hooks", {}).items() if groups}
    rest = {key: value for key, value in data.items() if key != "hooks"}
    return {**rest, "hooks": hooks} if hooks else rest


@given(settings=_settings, spillvault=st.sampled_from([SPILLVAULT, "/a b/spillvault"]))
def test_uninstall_undoes_install(settings: dict[str, Any], spillvault: str) -> None:
    """Foreign groups and keys survive a round trip; installing twice is installing."""
    text = json.dumps(settings)
    assume(not CLIENT.installed(text))
    command = [spillvault, "hook", "run", "codex", "PreToolUse"]
    installed = CLIENT.install(text, command)
    assert CLIENT.installed(installed)
    assert CLIENT.install(installed, command) == installed
    back = json.loads(CLIENT.uninstall(installed))
    assert _pruned(back) == _pruned(settings)
    if _pruned(settings) == settings:
        assert back == settings
