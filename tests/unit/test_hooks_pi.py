"""pi's extension: what `tool_call` and `tool_result` answer, and the file installed.

The payloads are what the extension sends: pi's event as its handlers get
it, plus `session_id` and `cwd` from their context. The event shapes are
those of `@mariozechner/pi-coding-agent` 0.73.1
`dist/core/extensions/types.d.ts` (`BashToolCallEvent {type, toolCallId,
toolName, input: {command, timeout?}}`, `ToolResultEvent {…, content,
details, isError}`, `BashToolDetails {truncation?, fullOutputPath?}`); the
texts are pi's bash tool's (`dist/core/tools/bash.js`) as recorded in runs.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.hooks import install, shim_outputs
from spillvault.adapters.hooks.client import HookConfigError, HookContext
from spillvault.adapters.hooks.entry import OUTPUT_LIMIT_CHARS, run_hook
from spillvault.adapters.hooks.pi import AFTER, BEFORE, CLIENT

if TYPE_CHECKING:
    from pathlib import Path

SPILLVAULT = "/opt/spill vault/bin/spillvault"
SESSION = "01a2342c-83c6-728c-9ce3-3e2e3bcf20e7"
BIG = "".join(f"line {n}\n" for n in range(5_000))  # 48,890 characters
PREVIEW = "[tool result stored as s/1; tool: bash]\n" + "".join(
    f"{n}\n" for n in range(4_000)
)


class FakeGate:
    """The gate's contract: a preview for text over 29,000 characters."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, text: str, tool: str, session: str) -> str | None:
        self.calls.append((text, tool, session))
        if len(text) <= 29_000:
            return None
        return f"[tool result stored as {session}/1; tool: {tool}]\n{text[:100]}"


def _context(gate: FakeGate, environ: dict[str, str] | None = None) -> HookContext:
    return HookContext(spillvault=SPILLVAULT, environ=environ or {}, gate=gate)


def _call(command: str, tool: str = "bash") -> dict[str, Any]:
    return {
        "type": "tool_call", "toolCallId": "call_1", "toolName": tool,
        "input": {"command": command, "timeout": 60},
        "session_id": SESSION, "cwd": "/work/proj",
    }  # fmt: skip


def _result(
    text: str, tool: str = "bash", details: Any = None, *, error: bool = False
) -> dict[str, Any]:
    return {
        "type": "tool_result", "toolCallId": "call_1", "toolName": tool,
        "input": {"command": "make"}, "content": [{"type": "text", "text": text}],
        "details": details, "isError": error, "session_id": SESSION, "cwd": "/p",
    }  # fmt: skip


def _answer(
    event: str, payload: dict[str, Any], gate: FakeGate | None = None, **env: str
) -> Any:
    context = _context(gate or FakeGate(), env)
    return json.loads(CLIENT.respond(event, payload, context))


def _cut(path: Path, total: int) -> dict[str, Any]:
    """BashToolDetails of an output pi cut to its last 2,000 lines."""
    truncation = {
        "truncated": True, "truncatedBy": "lines", "totalLines": total,
        "outputLines": 2000, "maxLines": 2000, "maxBytes": 51200,
    }  # fmt: skip
    return {"truncation": truncation, "fullOutputPath": str(path)}


# tool_call -------------------------------------------------------------------------


def test_a_bash_command_is_wrapped_with_bash_whatever_the_login_shell() -> None:
    answer = _answer(BEFORE, _call("pytest -x"), SHELL="/usr/bin/zsh")
    assert shlex.split(answer["command"]) == [
        SPILLVAULT, "run", "--session", f"pi-{SESSION}", "--fail-open", "--",
        "bash", "-lc", "pytest -x",
    ]  # fmt: skip
    assert CLIENT.rewritten(json.dumps(answer)) == answer["command"]
    assert CLIENT.check(BEFORE, json.dumps(answer)) == []


@pytest.mark.parametrize(
    "payload",
    [
        _call("cd src && make"),  # refused by the wrapper: the state would be lost
        _call("vim notes.txt"),
        _call("ls", tool="read"),
        {**_call("ls"), "input": {"path": "x"}},
        {**_call("ls"), "input": "ls"},
        {"toolName": 3},
    ],
)
def test_what_is_not_wrapped_is_left_as_it_was(payload: dict[str, Any]) -> None:
    assert _answer(BEFORE, payload) == {}


def test_the_session_is_pis_unless_spillvault_session_is_set() -> None:
    assert f"pi-{SESSION}" in _answer(BEFORE, _call("make"))["command"]
    mine = _answer(BEFORE, _call("make"), SPILLVAULT_SESSION="mine")
    assert "--session mine " in mine["command"]
    shared = _answer(BEFORE, {**_call("make"), "session_id": ""})
    assert "--session pi-shared " in shared["command"]


# tool_result -----------------------------------------------------------------------


def test_a_short_result_is_left_as_it_was() -> None:
    assert _answer(AFTER, _result("ok\n")) == {}


def test_a_long_result_is_replaced_by_the_preview() -> None:
    gate = FakeGate()
    answer = _answer(AFTER, _result(BIG, tool="read"), gate)
    assert gate.calls == [(BIG, "read", f"pi-{SESSION}")]
    preview = gate(BIG, "read", f"pi-{SESSION}")
    assert answer == {"content": [{"type": "text", "text": preview}]}


def test_a_cut_bash_output_is_gated_whole_from_pis_file(tmp_path: Path) -> None:
    whole = "".join(f"{n}\n" for n in range(1, 200_001))
    saved = tmp_path / "pi-bash-0123456789abcdef.log"
    saved.write_text(whole)
    note = f"[Showing lines 198002-200001 of 200001. Full output: {saved}]"
    kept = f"{whole[-14_000:]}\n\n{note}"
    gate = FakeGate()
    answer = _answer(AFTER, _result(kept, details=_cut(saved, 200_001)), gate)
    assert [text for text, _, _ in gate.calls] == [whole]
    assert answer["content"][0]["text"].startswith("[tool result stored as ")


def test_a_cut_spillvault_preview_is_shown_whole(tmp_path: Path) -> None:
    saved = tmp_path / "pi-bash-00ff.log"
    saved.write_text(PREVIEW)
    note = f"[Showing lines 2001-4001 of 4001. Full output: {saved}]"
    kept = f"{PREVIEW[-9_000:]}\n\n{note}"
    gate = FakeGate()
    answer = _answer(AFTER, _result(kept, details=_cut(saved, 4_001)), gate)
    assert answer == {"content": [{"type": "text", "text": PREVIEW}]}
    assert gate.calls == []


def test_a_failing_commands_file_is_found_by_its_note(tmp_path: Path) -> None:
    saved = tmp_path / "pi-bash-9b5e43bd2e7ca704.log"
    saved.write_text(PREVIEW)
    kept = (
        f"{PREVIEW[-9_000:]}\n\n[Showing lines 2001-4001 of 4001. Full output: "
        f"{saved}]\n\nCommand exited with code 3"
    )
    answer = _answer(AFTER, _result(kept, details={}, error=True))
    assert answer == {
        "content": [
            {"type": "text", "text": f"{PREVIEW}\n\nCommand exited with code 3"}
        ]
    }


@pytest.mark.parametrize(
    "name", ["notes.log", "pi-bash-xyz.log", "pi-bash-00ff.log.bak", "pi-bash-.log"]
)
def test_a_note_naming_another_file_is_not_read(tmp_path: Path, name: str) -> None:
    saved = tmp_path / name
    saved.write_text(PREVIEW)
    kept = f"{BIG}\n\n[Showing lines 1-2 of 9. Full output: {saved}]\n\nCommand aborted"
    gate = FakeGate()
    answer = _answer(AFTER, _result(kept, details={}, error=True), gate)
    assert [text for text, _, _ in gate.calls] == [kept]
    assert answer["content"][0]["text"].endswith("\n\nCommand aborted")


def test_a_preview_is_never_stored_again() -> None:
    gate = FakeGate()
    text = PREVIEW + "\n\nCommand exited with code 1"
    assert _answer(AFTER, _result(text, error=True), gate) == {}
    assert gate.calls == []


def test_an_unreadable_output_file_gates_what_pi_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim_outputs, "FULL_OUTPUT_MAX_BYTES", 1_000)
    big = tmp_path / "pi-bash-aa.log"
    big.write_text("z" * 1_001)
    fifo = tmp_path / "pi-bash-bb.log"
    os.mkfifo(fifo)
    for path in (big, fifo, tmp_path / "pi-bash-cc.log", tmp_path):
        gate = FakeGate()
        _answer(AFTER, _result(BIG, details=_cut(path, 9_000)), gate)
        assert [text for text, _, _ in gate.calls] == [BIG]


def test_images_are_kept_beside_the_preview() -> None:
    image = {"type": "image", "data": "aGk=", "mimeType": "image/png"}
    content = [image, {"type": "text", "text": BIG}]
    payload = {**_result(BIG, tool="read"), "content": content}
    answer = _answer(AFTER, payload)
    assert answer["content"][1:] == [image]


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {**_result(BIG), "content": "text"},
        {**_result(BIG), "content": [{"type": "text", "text": 3}]},
        {**_result(BIG), "toolName": None},
    ],
)
def test_a_payload_of_another_shape_changes_nothing(payload: dict[str, Any]) -> None:
    assert _answer(AFTER, payload) == {}
    assert _answer("session_start", payload) == {}


def test_the_doctor_canaries_go_through_the_real_hook() -> None:
    output = "".join(f"doctor line {n}\n" for n in range(1, 300_001))
    for event, payload in [
        (BEFORE, CLIENT.shell_canary("seq 1 9", "/tmp")),
        (AFTER, CLIENT.output_canary(output, "/tmp")),
    ]:
        stdout, stderr = io.StringIO(), io.StringIO()
        status = run_hook(
            "pi", event, stdin=io.StringIO(json.dumps(payload)), stdout=stdout,
            stderr=stderr, environ={"PATH": os.environ["PATH"]},
        )  # fmt: skip
        assert (status, stderr.getvalue()) == (0, "")
        assert CLIENT.check(event, stdout.getvalue().strip()) == []
    shown = CLIENT.shown(stdout.getvalue())
    assert shown is not None
    assert len(shown) <= OUTPUT_LIMIT_CHARS
    assert re.match(r"\[tool result stored as pi-spillvault-doctor/1;", shown)


@pytest.mark.parametrize(
    ("event", "answer", "problems"),
    [
        (BEFORE, "{}", []),
        (BEFORE, '{"command": ""}', ["command is not a non-empty string"]),
        (AFTER, '{"content": [{"type": "text", "text": "x"}]}', []),
        (AFTER, '{"content": {}}', ["content is not a list of content blocks"]),
        (AFTER, '{"isError": "no"}', ["isError is not a boolean"]),
        (
            AFTER,
            "[]",
            ["stdout is not a JSON object: the extension leaves the call as is"],
        ),
        ("input", "{}", ["pi's extension runs no 'input' hook"]),
    ],
)
def test_check_names_answers_the_extension_would_not_apply(
    event: str, answer: str, problems: list[str]
) -> None:
    assert CLIENT.check(event, answer) == problems


# the extension file ----------------------------------------------------------------


def test_config_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, project = tmp_path / "home", tmp_path / "proj"
    monkeypatch.delenv("PI_CODING_AGENT_DIR", raising=False)
    user = CLIENT.config_path("user", home=home, project=project)
    assert user == home / ".pi/agent/extensions/spillvault.ts"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "agent"))
    user = CLIENT.config_path("user", home=home, project=project)
    assert user == tmp_path / "agent/extensions/spillvault.ts"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", "~/pi-agent")
    user = CLIENT.config_path("user", home=home, project=project)
    assert user == home / "pi-agent/extensions/spillvault.ts"
    local = CLIENT.config_path("project", home=home, project=project)
    assert local == project / ".pi/extensions/spillvault.ts"


def test_install_writes_the_extension_and_uninstall_deletes_it(tmp_path: Path) -> None:
    path = tmp_path / ".pi" / "extensions" / "spillvault.ts"
    state = tmp_path / "state"
    install.apply(
        install.plan_install(CLIENT, path, SPILLVAULT), state, installing=True
    )
    text = path.read_text()
    assert CLIENT.installed(text)
    assert json.dumps(SPILLVAULT) in text
    assert "__" not in text  # every placeholder filled
    assert CLIENT.hook_commands(text) == {
        BEFORE: f"'{SPILLVAULT}' hook run pi tool_call",
        AFTER: f"'{SPILLVAULT}' hook run pi tool_result",
    }
    assert not install.plan_install(CLIENT, path, SPILLVAULT).changes
    install.apply(install.plan_uninstall(CLIENT, path, state), state, installing=False)
    assert not path.exists()
    assert list(path.parent.iterdir()) == []


def test_a_file_not_ours_is_refused_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "spillvault.ts"
    mine = "export default function (pi) {}\n"
    path.write_text(mine)
    with pytest.raises(HookConfigError, match="not written by spillvault"):
        install.plan_install(CLIENT, path, SPILLVAULT)
    assert not install.plan_uninstall(CLIENT, path, tmp_path / "state").changes
    assert path.read_text() == mine
    assert CLIENT.hook_commands(mine) == {}
