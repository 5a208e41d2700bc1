"""Gemini CLI's hooks by contract: recorded inputs in, answers valid for Gemini CLI.

The inputs are the shapes of `BeforeToolInput`/`AfterToolInput` in
packages/core/src/hooks/types.ts (google-gemini/gemini-cli@5411f113,
v0.56.0-nightly.20260822), as captured verbatim from @google/gemini-cli
0.61.0 by a hook that logged its stdin. The output schema is
written from the same file's `HookOutput`, `BeforeToolOutput` and
`AfterToolOutput` (with `tailToolCallRequest`, since 0.31.0).
"""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.client import HookConfigError, HookContext
from spillvault.adapters.hooks.entry import run_hook
from spillvault.adapters.hooks.gemini import CLIENT, READ_LINE_CHARS

SPILLVAULT = "/opt/bin/spillvault"
SESSION_ID = "6471784e-2a0c-4f4e-9d5b-0d1c2e3f4a5b"
TAIL = {
    "type": "object",
    "required": ["name", "args"],
    "properties": {"name": {"type": "string"}, "args": {"type": "object"}},
    "additionalProperties": False,
}
SPECIFIC = {  # BeforeToolOutput / AfterToolOutput .hookSpecificOutput
    "BeforeTool": {"tool_input": {"type": "object"}},
    "AfterTool": {"additionalContext": {"type": "string"}, "tailToolCallRequest": TAIL},
}


def _schema(event: str) -> dict[str, Any]:
    """HookOutput, with the hookSpecificOutput `event` may carry."""
    return {
        "type": "object",
        "properties": {
            "continue": {"type": "boolean"},
            "stopReason": {"type": "string"},
            "suppressOutput": {"type": "boolean"},
            "systemMessage": {"type": "string"},
            "decision": {"enum": ["ask", "block", "deny", "approve", "allow"]},
            "reason": {"type": "string"},
            "hookSpecificOutput": {
                "type": "object",
                "required": ["hookEventName"],
                "properties": {"hookEventName": {"const": event}, **SPECIFIC[event]},
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home whose Gemini CLI knows the project `proj` (its temp dir, its marker)."""
    home = tmp_path / "home"
    project = tmp_path / "proj"
    project.mkdir()
    temp = home / ".gemini" / "tmp" / "proj"
    temp.mkdir(parents=True)
    (temp / ".project_root").write_text(str(project))
    (home / ".gemini" / "projects.json").write_text(
        json.dumps({"projects": {str(project): "proj"}}, indent=2)
    )
    return home


def _cwd(home: Path) -> str:
    return str(home.parent / "proj")


def _before(home: Path, command: str, **tool_input: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION_ID,
        "transcript_path": "",
        "cwd": _cwd(home),
        "hook_event_name": "BeforeTool",
        "timestamp": "2026-12-02T00:31:52.558Z",
        "tool_name": "run_shell_command",
        "tool_input": {"command": command, "description": "test", **tool_input},
    }


def _after(home: Path, tool: str, content: object, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": SESSION_ID,
        "transcript_path": "",
        "cwd": _cwd(home),
        "hook_event_name": "AfterTool",
        "timestamp": "2026-12-02T00:31:53.100Z",
        "tool_name": tool,
        "tool_input": extra.pop("tool_input", {}),
        "tool_response": {"llmContent": content, "returnDisplay": "", **extra},
    }


def _context(home: Path, gate: Any = None, **environ: str) -> HookContext:
    env = {"HOME": str(home), "SHELL": "/bin/bash", **environ}
    return HookContext(
        spillvault=SPILLVAULT, environ=env, gate=gate or (lambda *_: None)
    )


def _answer(
    event: str, payload: dict[str, Any], context: HookContext
) -> dict[str, Any]:
    text = CLIENT.respond(event, payload, context)
    answer = json.loads(text)
    Draft202012Validator(_schema(event)).validate(answer)
    assert CLIENT.check(event, text) == []
    assert "decision" not in answer  # nothing is approved, blocked or asked for
    return answer


# BeforeTool ---------------------------------------------------------------------------


def test_a_shell_command_is_wrapped_with_every_argument_kept(home: Path) -> None:
    """tool_input replaces the arguments whole: every field stays, the command wraps."""
    payload = _before(home, "pytest -x", dir_path="sub", is_background=False)
    answer = _answer("BeforeTool", payload, _context(home))
    updated = answer["hookSpecificOutput"]["tool_input"]
    assert {k: v for k, v in updated.items() if k != "command"} == {
        "description": "test", "dir_path": "sub", "is_background": False,
    }  # fmt: skip
    assert shlex.split(updated["command"]) == [
        SPILLVAULT, "run", "--session", f"gemini-{SESSION_ID}", "--fail-open",
        "--", "bash", "-lc", "pytest -x",
    ]  # fmt: skip
    assert CLIENT.rewritten(json.dumps(answer)) == updated["command"]


@pytest.mark.parametrize(
    "command",
    [
        "cd src", "export A=1", "vim x", "sleep 9 &", "cat <<EOF\nx\nEOF",
        "ls -la", "cat build.log", "git log", "grep -r TODO .", "seq 1 600000",
        "rm -rf build", "sudo rm -f /tmp/x", "git -c core.pager=less log | head",
        "find . -delete", "ln -s a b", "git log --output=x | wc -l", "find .",
    ],
)  # fmt: skip
def test_what_gemini_judges_by_its_words_is_left_alone(
    home: Path, command: str
) -> None:
    """The wrapper refuses, or Gemini's own heuristics would judge a wrapper instead."""
    assert _answer("BeforeTool", _before(home, command), _context(home)) == {}


@pytest.mark.parametrize(
    "command",
    ["make", "npm test", "git log | head -50", "seq 1 9 | cat", "make 2>&1 | tail"],
)
def test_what_gemini_judges_the_same_either_way_is_wrapped(
    home: Path, command: str
) -> None:
    """Compound commands, and commands its heuristics ignore, are wrapped."""
    answer = _answer("BeforeTool", _before(home, command), _context(home))
    assert shlex.split(answer["hookSpecificOutput"]["tool_input"]["command"])[-1] == (
        command
    )


def test_background_runs_other_tools_and_tail_calls_are_left_alone(
    home: Path,
) -> None:
    """`is_background`, a non-shell tool, `original_request_name`: `{}`."""
    context = _context(home)
    assert (
        _answer("BeforeTool", _before(home, "make", is_background=True), context) == {}
    )
    other = {**_before(home, "x"), "tool_name": "read_file",
             "tool_input": {"file_path": "/a"}}  # fmt: skip
    assert _answer("BeforeTool", other, context) == {}
    tail = {**_before(home, "make"), "original_request_name": "read_file"}
    assert _answer("BeforeTool", tail, context) == {}


def _policy(home: Path, name: str, text: str) -> None:
    policies = home / ".gemini" / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    (policies / name).write_text(text)


def test_a_command_a_policy_rule_names_is_judged_as_written(home: Path) -> None:
    """A rule that names the command, or a part, leaves it to Gemini's policy."""
    _policy(home, "mine.toml", (
        '[[rule]]\ntoolName = "run_shell_command"\ncommandPrefix = "git push"\n'
        'decision = "deny"\npriority = 100\n\n'
        '[[rule]]\ntoolName = "run_shell_command"\ncommandRegex = "npm (ci|test)"\n'
        'decision = "allow"\npriority = 100\n\n'
        '[[rule]]\ntoolName = "run_shell_command"\ndecision = "ask_user"\n'
        'priority = 50\n'
    ))  # fmt: skip
    context = _context(home)
    for judged in ("make && git push origin", "npm test", "npm ci --silent"):
        assert _answer("BeforeTool", _before(home, judged), context) == {}
    assert _answer("BeforeTool", _before(home, "make -j8"), context) != {}
    assert _answer("BeforeTool", _before(home, "make && git pushx"), context) != {}


def test_settings_allow_lists_count_as_rules(home: Path) -> None:
    """`tools.allowed: ["run_shell_command(npm test)"]` names `npm test`."""
    project = home.parent / "proj"
    (project / ".gemini").mkdir()
    allowed = {"tools": {"allowed": ["run_shell_command(npm test)", "read_file"]}}
    (project / ".gemini" / "settings.json").write_text(json.dumps(allowed))
    context = _context(home)
    assert _answer("BeforeTool", _before(home, "npm test"), context) == {}
    assert _answer("BeforeTool", _before(home, "make"), context) != {}


def test_an_allow_always_for_the_wrapper_stops_the_wrapping(home: Path) -> None:
    """A saved prefix of the wrapper would approve every wrapped command."""
    _policy(home, "auto-saved.toml", (
        f'[[rule]]\ntoolName = "run_shell_command"\ncommandPrefix = ["{SPILLVAULT}"]\n'
        'decision = "allow"\npriority = 100\n'
    ))  # fmt: skip
    assert _answer("BeforeTool", _before(home, "make"), _context(home)) == {}


def test_a_policy_file_that_does_not_parse_counts_as_naming_it(home: Path) -> None:
    """What the hook cannot read, it cannot rule out: the command stays."""
    _policy(home, "broken.toml", "[[rule]\n")
    assert _answer("BeforeTool", _before(home, "make"), _context(home)) == {}


# AfterTool ----------------------------------------------------------------------------


def _gate(text: str, tool: str, session: str) -> str | None:
    assert session == f"gemini-{SESSION_ID}"
    if len(text) <= 100:
        return None
    stored = f"[tool result stored as {session}/1; tool: {tool}; …]"
    return f"{stored}\nhead\n…\ntail {len(text)}"


def _tail(answer: dict[str, Any], home: Path) -> tuple[Path, dict[str, Any]]:
    request = answer["hookSpecificOutput"]["tailToolCallRequest"]
    assert request["name"] == "read_file"
    args = request["args"]
    path = Path(args["file_path"])
    assert path.parent.parent == home / ".gemini" / "tmp" / "proj" / "spillvault"
    return path, args


@pytest.mark.parametrize(
    ("tool", "content", "text"),
    [
        ("run_shell_command", "Output: " + "x" * 300, "Output: " + "x" * 300),
        ("read_file", "y" * 300, "y" * 300),
        ("read_many_files", ["--- a ---\n" + "a" * 200, "--- b ---\nb"],
         "--- a ---\n" + "a" * 200 + "\n--- b ---\nb"),
        ("grep_search", "Found 9:\n" + "z" * 300, "Found 9:\n" + "z" * 300),
        ("web_fetch", "w" * 300, "w" * 300),
        ("mcp_fs_read", [{"text": "m" * 200}, {"text": "n"}], "m" * 200 + "\nn"),
    ],
)  # fmt: skip
def test_a_long_output_is_replaced_by_a_tail_call_reading_its_preview(
    home: Path, tool: str, content: object, text: str
) -> None:
    """The preview is written where read_file may read it, and read whole."""
    payload = _after(home, tool, content, tool_input={"command": "make"})
    answer = _answer("AfterTool", payload, _context(home, _gate))
    path, args = _tail(answer, home)
    preview = _gate(text, tool, f"gemini-{SESSION_ID}")
    assert path.read_text() == preview
    assert args == {"file_path": str(path), "start_line": 1, "end_line": 4}
    assert path.name == "1.txt"
    assert CLIENT.shown(json.dumps(answer)) == preview


def test_a_preview_with_long_lines_is_cut_where_read_file_would_not(
    home: Path,
) -> None:
    """read_file shortens lines over 2,000 characters: the file holds none."""
    long_line = "[tool result stored as gemini-s/3; …]\n" + "q" * (
        3 * READ_LINE_CHARS + 5
    )
    payload = _after(home, "web_fetch", "w" * 500)
    answer = _answer("AfterTool", payload, _context(home, lambda *_: long_line))
    path, args = _tail(answer, home)
    lines = path.read_text().split("\n")
    assert max(map(len, lines)) == READ_LINE_CHARS
    assert "".join(lines[1:]) == "q" * (3 * READ_LINE_CHARS + 5)
    assert args["end_line"] == len(lines) == 5


def test_the_transcript_locates_the_temp_dir_without_the_registry(
    home: Path,
) -> None:
    """`transcript_path` lies in `<temp>/chats/`: that is enough with its marker."""
    (home / ".gemini" / "projects.json").unlink()
    payload = _after(home, "read_file", "y" * 300)
    payload["transcript_path"] = str(
        home / ".gemini" / "tmp" / "proj" / "chats" / "session-2026-12-02T00-31.jsonl"
    )
    answer = _answer("AfterTool", payload, _context(home, _gate))
    _tail(answer, home)


def _never(*_: Any) -> str:
    pytest.fail("nothing is stored when no preview can be shown")


def test_no_temp_dir_gemini_made_means_no_tail_call(home: Path) -> None:
    """Unknown project, or a marker naming another folder: the output stays."""
    payload = _after(home, "read_file", "y" * 300)
    payload["cwd"] = str(home.parent)
    assert _answer("AfterTool", payload, _context(home, _never)) == {}
    (home / ".gemini" / "tmp" / "proj" / ".project_root").write_text("/elsewhere")
    payload = _after(home, "read_file", "y" * 300)
    assert _answer("AfterTool", payload, _context(home, _never)) == {}


def test_what_is_not_gated_is_left_alone(home: Path) -> None:
    """Short, wrapped, failed, non-text, ungated tools and tail calls: `{}`."""
    context = _context(home, _gate)
    wrapped = f"{SPILLVAULT} run --session s --fail-open -- bash -lc make"
    cases = [
        _after(home, "read_file", "short"),
        _after(home, "run_shell_command", "x" * 300, tool_input={"command": wrapped}),
        _after(home, "read_file", "y" * 300, error={"message": "no", "type": "x"}),
        _after(home, "read_many_files", [{"inlineData": {"mimeType": "image/png",
                                                         "data": "AA"}}]),
        _after(home, "write_file", "w" * 300),
        {**_after(home, "read_file", "y" * 300), "original_request_name": "web_fetch"},
    ]  # fmt: skip
    for payload in cases:
        assert _answer("AfterTool", payload, context) == {}


@pytest.mark.parametrize("stdin", ["not json", "[1, 2]", ""])
def test_bad_input_fails_open(stdin: str) -> None:
    """Any error: the no-op answer, one line on stderr, exit 0."""
    for event in ("BeforeTool", "AfterTool"):
        out, err = io.StringIO(), io.StringIO()
        status = run_hook(
            "gemini", event, stdin=io.StringIO(stdin), stdout=out, stderr=err,
            environ={"HOME": "/nonexistent"},
        )  # fmt: skip
        assert status == 0
        assert out.getvalue() == "{}\n"
        if stdin:
            assert err.getvalue().startswith(f"spillvault hook gemini {event}: ")
            assert err.getvalue().count("\n") == 1


def test_an_unknown_event_fails_open() -> None:
    """A stale configuration never blocks a tool."""
    out, err = io.StringIO(), io.StringIO()
    status = run_hook(
        "gemini", "BeforeModel", stdin=io.StringIO("{}"), stdout=out, stderr=err,
        environ={},
    )  # fmt: skip
    assert (status, out.getvalue()) == (0, "{}\n")
    assert "Gemini CLI has no 'BeforeModel' hook" in err.getvalue()


def test_check_names_answers_gemini_would_not_apply() -> None:
    """The doctor's judge: not JSON, wrong event, a tail call without args."""
    assert CLIENT.check("BeforeTool", "plain text")
    assert CLIENT.check("BeforeTool", '{"decision": "maybe"}')
    wrong = {"hookSpecificOutput": {"hookEventName": "AfterTool"}}
    assert CLIENT.check("BeforeTool", json.dumps(wrong))
    bad_tail = {"hookSpecificOutput": {"tailToolCallRequest": {"name": "read_file"}}}
    assert CLIENT.check("AfterTool", json.dumps(bad_tail))
    assert CLIENT.check("AfterTool", "{}") == []


def test_caveats_name_trust_and_what_a_version_lacks() -> None:
    """Untrusted folders always; what a version lacks, first and by its version."""
    current = CLIENT.caveats("0.61.0")
    assert any("untrusted folder" in note for note in current)
    assert not any(note.startswith("0.61.0:") for note in current)
    old = CLIENT.caveats("0.35.0")
    assert old[0] == (
        "0.35.0: before 0.36.0 BeforeTool runs after the user approved the command"
    )
    assert len(CLIENT.caveats("0.30.1")) == len(current) + 2
    assert CLIENT.caveats(None) == CLIENT.caveats("not a version") == current


# configuration ------------------------------------------------------------------------

USER_SETTINGS = """{
  "security": {"auth": {"selectedType": "gemini-api-key"}},
  "hooksConfig": {"enabled": true, "disabled": ["notify"]},
  "hooks": {
    "AfterAgent": [{"hooks": [{"type": "command", "command": "notify-send done",
                               "name": "notify"}]}],
    "BeforeTool": [{"matcher": "^write_file$",
                    "hooks": [{"type": "command", "command": "./lint.sh"}]}]
  },
  "model": {"name": "gemini-2.5-pro"}
}
"""


def _settings_file(tmp_path: Path, text: str | None) -> tuple[Path, Path]:
    path = CLIENT.config_path("user", home=tmp_path / "home", project=tmp_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is not None:
        path.write_text(text)
    return path, tmp_path / "state"


def _install(path: Path, state: Path) -> None:
    change = install.plan_install(CLIENT, path, SPILLVAULT)
    install.apply(change, state, installing=True)


def _uninstall(path: Path, state: Path) -> None:
    install.apply(install.plan_uninstall(CLIENT, path, state), state, installing=False)


def test_install_adds_our_groups_and_keeps_everything_else(tmp_path: Path) -> None:
    """Matchers anchored, timeout in milliseconds, the user's hooks and keys kept."""
    path, state = _settings_file(tmp_path, USER_SETTINGS)
    assert path == tmp_path / "home" / ".gemini" / "settings.json"
    _install(path, state)
    data = json.loads(path.read_text())
    original = json.loads(USER_SETTINGS)
    assert {k: v for k, v in data.items() if k != "hooks"} == {
        k: v for k, v in original.items() if k != "hooks"
    }
    before, ours_before = data["hooks"]["BeforeTool"]
    assert before == original["hooks"]["BeforeTool"][0]
    assert data["hooks"]["AfterAgent"] == original["hooks"]["AfterAgent"]
    assert ours_before["matcher"] == "^run_shell_command$"
    (ours_after,) = data["hooks"]["AfterTool"]
    assert ours_after["matcher"].startswith("^(run_shell_command|read_file|")
    handler = ours_after["hooks"][0]
    assert handler["timeout"] == 30_000
    assert shlex.split(handler["command"]) == [
        SPILLVAULT, "hook", "run", "gemini", "AfterTool"
    ]  # fmt: skip
    assert CLIENT.hook_commands(path.read_text()) == {
        "BeforeTool": f"{SPILLVAULT} hook run gemini BeforeTool",
        "AfterTool": f"{SPILLVAULT} hook run gemini AfterTool",
    }
    assert CLIENT.installed(path.read_text())


def test_install_twice_is_install_once_and_uninstall_gives_back_the_bytes(
    tmp_path: Path,
) -> None:
    """The second install changes nothing; uninstall restores the file exactly."""
    path, state = _settings_file(tmp_path, USER_SETTINGS)
    _install(path, state)
    once = path.read_text()
    assert not install.plan_install(CLIENT, path, SPILLVAULT).changes
    _install(path, state)
    assert path.read_text() == once
    _uninstall(path, state)
    assert path.read_text() == USER_SETTINGS
    assert not CLIENT.installed(path.read_text())


def test_a_file_we_created_goes_again(tmp_path: Path) -> None:
    """No settings before: uninstall removes the file it made."""
    path, state = _settings_file(tmp_path, None)
    _install(path, state)
    assert CLIENT.installed(path.read_text())
    _uninstall(path, state)
    assert not path.exists()


def test_a_file_the_user_edited_since_loses_only_our_entries(tmp_path: Path) -> None:
    """An edit after install: uninstall removes our groups, keeps the edit."""
    path, state = _settings_file(tmp_path, USER_SETTINGS)
    _install(path, state)
    data = json.loads(path.read_text())
    data["ui"] = {"theme": "dark"}
    data["hooks"]["AfterTool"].append(
        {"matcher": "^web_fetch$", "hooks": [{"type": "command", "command": "./log"}]}
    )
    path.write_text(json.dumps(data, indent=2) + "\n")
    _uninstall(path, state)
    after = json.loads(path.read_text())
    assert after["ui"] == {"theme": "dark"}
    assert after["hooks"]["AfterTool"] == [data["hooks"]["AfterTool"][1]]
    assert (
        after["hooks"]["BeforeTool"] == json.loads(USER_SETTINGS)["hooks"]["BeforeTool"]
    )
    assert not CLIENT.installed(path.read_text())


@pytest.mark.parametrize("text", ["{not json", "[]", '{"hooks": {"BeforeTool": {}}}'])
def test_a_file_that_is_not_settings_is_refused_and_left_alone(
    tmp_path: Path, text: str
) -> None:
    """Nothing is written when the file does not parse as Gemini settings."""
    path, _ = _settings_file(tmp_path, text)
    with pytest.raises(HookConfigError):
        install.plan_install(CLIENT, path, SPILLVAULT)
    assert path.read_text() == text
    assert not path.with_name(path.name + install.BACKUP_SUFFIX).exists()


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_HANDLERS = st.fixed_dictionaries(
    {"type": st.just("command"), "command": st.text(min_size=1, max_size=20)},
    optional={"timeout": st.integers(1, 600_000), "name": st.text(max_size=8)},
)
_GROUPS = st.fixed_dictionaries(
    {"hooks": st.lists(_HANDLERS, min_size=1, max_size=2)},
    optional={"matcher": st.text(max_size=12)},
)
_EVENTS = st.sampled_from(["BeforeTool", "AfterTool", "AfterAgent", "SessionStart"])
_SETTINGS = st.dictionaries(
    st.text(max_size=8).filter(lambda key: key != "hooks"), _VALUES, max_size=4
).flatmap(
    lambda rest: st.one_of(
        st.just(rest),
        st.dictionaries(
            _EVENTS, st.lists(_GROUPS, min_size=1, max_size=2), min_size=1
        ).map(lambda hooks: {**rest, "hooks": hooks}),
    )
)


@given(settings=_SETTINGS)
def test_uninstall_undoes_install(settings: dict[str, Any]) -> None:
    """For settings with no empty hook lists: uninstall(install(x)) is x."""
    text = json.dumps(settings)
    installed = CLIENT.install(
        text, [SPILLVAULT, "hook", "run", "gemini", "BeforeTool"]
    )
    assert CLIENT.installed(installed)
    assert json.loads(CLIENT.uninstall(installed)) == settings
