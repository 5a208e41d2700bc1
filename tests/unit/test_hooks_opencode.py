"""OpenCode's plugin: what `tool.execute.after` answers, and the file installed.

The payloads are what the plugin sends, `{input, output}` as OpenCode calls
`tool.execute.after(input, output)`: the shapes of `@opencode-ai/plugin@1.18.33`
`dist/index.d.ts` (input `{tool, sessionID, callID, args}`, output `{title,
output, metadata}`), with the metadata and the MCP `CallToolResult` output
recorded from opencode 1.18.33 runs.
"""

from __future__ import annotations

import io
import json
import os
import re
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.hooks import install, shim_outputs
from spillvault.adapters.hooks.client import HookConfigError, HookContext
from spillvault.adapters.hooks.entry import OUTPUT_LIMIT_CHARS, run_hook
from spillvault.adapters.hooks.opencode import AFTER, CLIENT

if TYPE_CHECKING:
    from pathlib import Path

SPILLVAULT = "/opt/spill vault/bin/spillvault"
SESSION = "ses_dcbd30e71ffeg71icroOkhWCAu"
BIG = "".join(f"line {n}\n" for n in range(5_000))  # 48,890 characters


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


def _builtin(tool: str, text: str, **metadata: Any) -> dict[str, Any]:
    call = {"tool": tool, "sessionID": SESSION, "callID": "toolu_01", "args": {}}
    output = {"title": tool, "output": text, "metadata": {"output": text, **metadata}}
    return {"input": call, "output": output}


def _mcp(*blocks: dict[str, Any]) -> dict[str, Any]:
    call = {"tool": "srv_echo_text", "sessionID": SESSION, "callID": "c1", "args": {}}
    return {"input": call, "output": {"content": list(blocks)}}


def _answer(payload: dict[str, Any], gate: FakeGate, **environ: str) -> Any:
    return json.loads(CLIENT.respond(AFTER, payload, _context(gate, environ)))


# answering tool.execute.after ---------------------------------------------------


def test_a_short_output_is_left_as_it_was() -> None:
    assert _answer(_builtin("bash", "ok\n", exit=0, truncated=False), FakeGate()) == {}


def test_a_long_output_is_replaced_by_the_preview() -> None:
    gate = FakeGate()
    answer = _answer(_builtin("read", BIG, truncated=False), gate)
    assert gate.calls == [(BIG, "read", f"opencode-{SESSION}")]
    assert answer == {"output": gate(BIG, "read", f"opencode-{SESSION}")}


def test_a_cut_output_is_gated_whole_from_opencodes_output_file(tmp_path: Path) -> None:
    whole = "".join(f"{n}\n" for n in range(1, 200_001))
    saved = tmp_path / "tool_2342a2ad9001vVwSwdJvvv4ik5"
    saved.write_text(whole)
    shown = f"...output truncated...\n\nFull output saved to: {saved}\n\n199999\n"
    gate = FakeGate()
    payload = _builtin("bash", shown, exit=0, truncated=True, outputPath=str(saved))
    answer = _answer(payload, gate)
    assert [text for text, _, _ in gate.calls] == [whole]
    assert answer["output"].startswith("[tool result stored as ")


def test_a_cut_spillvault_preview_is_shown_whole(tmp_path: Path) -> None:
    preview = "[tool result stored as s/1; tool: bash]\n" + "".join(
        f"{n}\n" for n in range(4_000)
    )
    saved = tmp_path / "tool_x"
    saved.write_text(preview)
    gate = FakeGate()
    payload = _builtin("bash", preview[-9_000:], truncated=True, outputPath=str(saved))
    assert _answer(payload, gate) == {"output": preview}
    assert gate.calls == []


def test_a_preview_is_never_stored_again() -> None:
    preview = "[tool result stored as s/1; tool: x]\n" + "y" * 29_900
    gate = FakeGate()
    assert _answer(_builtin("webfetch", preview), gate) == {}
    assert gate.calls == []


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


def _link(tmp_path: Path) -> str:
    target = tmp_path / "target"
    target.write_text("x" * 40_000)
    (tmp_path / "link").symlink_to(target)
    return str(tmp_path / "link")


@pytest.mark.parametrize(
    "where",
    [
        lambda tmp: str(tmp / "missing"),
        str,  # a directory
        _fifo,  # never opened for a blocking read
        _link,  # a symlink is not followed
        lambda _: "relative/tool_x",
        lambda _: None,
    ],
)
def test_an_unreadable_output_file_gates_what_opencode_kept(
    tmp_path: Path, where: Any
) -> None:
    gate = FakeGate()
    payload = _builtin("bash", BIG, truncated=True, outputPath=where(tmp_path))
    assert _answer(payload, gate)["output"].startswith("[tool result stored as ")
    assert [text for text, _, _ in gate.calls] == [BIG]


def test_an_output_file_over_the_bound_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim_outputs, "FULL_OUTPUT_MAX_BYTES", 1_000)
    saved = tmp_path / "tool_big"
    saved.write_text("z" * 1_001)
    gate = FakeGate()
    _answer(_builtin("bash", BIG, truncated=True, outputPath=str(saved)), gate)
    assert [text for text, _, _ in gate.calls] == [BIG]


def test_an_mcp_result_has_its_text_blocks_gated_and_other_blocks_kept() -> None:
    image = {"type": "image", "data": "aGk=", "mimeType": "image/png"}
    half = "a" * 20_000
    gate = FakeGate()
    answer = _answer(
        _mcp({"type": "text", "text": half}, image, {"type": "text", "text": half}),
        gate,
    )
    assert gate.calls == [(f"{half}\n{half}", "srv_echo_text", f"opencode-{SESSION}")]
    assert answer["content"][0]["text"].startswith("[tool result stored as ")
    assert answer["content"][1:] == [image]


def test_a_short_mcp_result_is_left_as_it_was() -> None:
    assert _answer(_mcp({"type": "text", "text": "hi"}), FakeGate()) == {}


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"input": {"tool": "bash"}},
        {"input": {"sessionID": SESSION}, "output": {"output": BIG}},
        {"input": {"tool": "x"}, "output": {"content": "not blocks"}},
        {"input": {"tool": "x"}, "output": {"content": [{"type": "text"}]}},
        {"input": {"tool": "x"}, "output": {"title": "no output"}},
    ],
)
def test_a_payload_of_another_shape_changes_nothing(payload: dict[str, Any]) -> None:
    assert _answer(payload, FakeGate()) == {}


def test_another_event_changes_nothing() -> None:
    answer = CLIENT.respond(
        "tool.execute.before", _builtin("bash", BIG), _context(FakeGate())
    )
    assert answer == "{}"
    assert CLIENT.no_op(AFTER) == "{}"


def test_the_session_is_opencodes_unless_spillvault_session_is_set() -> None:
    gate = FakeGate()
    payload = _builtin("read", BIG)
    payload["input"]["sessionID"] = "ses/../../x"
    _answer(payload, gate)
    _answer(payload, gate, SPILLVAULT_SESSION="mine")
    del payload["input"]["sessionID"]
    _answer(payload, gate)
    assert [s for _, _, s in gate.calls] == [
        "opencode-ses-..-..-x",
        "mine",
        "opencode-shared",
    ]


def test_the_doctor_canary_goes_through_the_real_gate() -> None:
    output = "".join(f"doctor line {n}\n" for n in range(1, 300_001))
    stdin = io.StringIO(json.dumps(CLIENT.output_canary(output, "/tmp")))
    stdout, stderr = io.StringIO(), io.StringIO()
    status = run_hook(
        "opencode", AFTER, stdin=stdin, stdout=stdout, stderr=stderr,
        environ={"PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert (status, stderr.getvalue()) == (0, "")
    answer = stdout.getvalue().strip()
    assert CLIENT.check(AFTER, answer) == []
    shown = CLIENT.shown(answer)
    assert shown is not None
    assert len(shown) <= OUTPUT_LIMIT_CHARS
    assert re.match(r"\[tool result stored as opencode-ses_spillvault_doctor/1;", shown)


@pytest.mark.parametrize(
    ("answer", "problems"),
    [
        ("{}", []),
        ('{"output": "x"}', []),
        ('{"content": [{"type": "text", "text": "x"}]}', []),
        ('{"output": 3}', ["output is not a string"]),
        ('{"content": "x"}', ["content is not a list of content blocks"]),
        (
            "nope",
            ["stdout is not a JSON object: the plugin leaves the output as it was"],
        ),
    ],
)
def test_check_names_answers_the_plugin_would_not_apply(
    answer: str, problems: list[str]
) -> None:
    assert CLIENT.check(AFTER, answer) == problems


def test_shown_reads_either_answer_shape() -> None:
    assert CLIENT.shown('{"output": "a"}') == "a"
    assert CLIENT.shown('{"content": [{"type": "text", "text": "b"}]}') == "b"
    assert CLIENT.shown("{}") is None
    assert CLIENT.rewritten('{"command": "x"}') is None


# the plugin file --------------------------------------------------------------


def test_config_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home, project = tmp_path / "home", tmp_path / "proj"
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    user = CLIENT.config_path("user", home=home, project=project)
    assert user == home / ".config/opencode/plugins/spillvault.js"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    user = CLIENT.config_path("user", home=home, project=project)
    assert user == tmp_path / "xdg/opencode/plugins/spillvault.js"
    local = CLIENT.config_path("project", home=home, project=project)
    assert local == project / ".opencode/plugins/spillvault.js"


def test_install_writes_the_plugin_and_uninstall_deletes_it(tmp_path: Path) -> None:
    path = tmp_path / ".opencode" / "plugins" / "spillvault.js"
    state = tmp_path / "state"
    change = install.plan_install(CLIENT, path, SPILLVAULT)
    install.apply(change, state, installing=True)
    text = path.read_text()
    assert CLIENT.installed(text)
    assert json.dumps(SPILLVAULT) in text
    assert CLIENT.hook_commands(text) == {
        AFTER: f"'{SPILLVAULT}' hook run opencode tool.execute.after"
    }
    assert not install.plan_install(CLIENT, path, SPILLVAULT).changes
    install.apply(install.plan_uninstall(CLIENT, path, state), state, installing=False)
    assert not path.exists()
    assert sorted(p.name for p in path.parent.iterdir()) == []


def test_uninstall_deletes_the_plugin_even_without_a_record(tmp_path: Path) -> None:
    path = tmp_path / "spillvault.js"
    path.write_text(CLIENT.install(None, [SPILLVAULT]))
    change = install.plan_uninstall(CLIENT, path, tmp_path / "state")
    install.apply(change, tmp_path / "state", installing=False)
    assert not path.exists()


def test_a_file_not_ours_is_refused_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "spillvault.js"
    path.write_text("export const Mine = async () => ({});\n")
    with pytest.raises(HookConfigError, match="not written by spillvault"):
        install.plan_install(CLIENT, path, SPILLVAULT)
    change = install.plan_uninstall(CLIENT, path, tmp_path / "state")
    assert not change.changes
    assert path.read_text() == "export const Mine = async () => ({});\n"
    assert CLIENT.hook_commands(path.read_text()) == {}


def test_the_plugin_exports_only_its_plugin_function() -> None:
    text = CLIENT.install(None, [SPILLVAULT])
    exports = re.findall(r"^export .*$", text, re.MULTILINE)
    assert exports == ["export const SpillvaultPlugin = async () => ({"]
    assert "__" not in text  # every placeholder filled
    assert "const TIMEOUT_MS = 30000;" in text
