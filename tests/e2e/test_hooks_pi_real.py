"""pi's extension as `spillvault hook install pi` writes it, run by pi itself.

pi 0.73.1 (tests/npm, `npm ci` by `make test`) finds and loads the file with
its own loader (`discoverAndLoadExtensions`), and tool events go through its
own `ExtensionRunner` and bash tool (tests/support/pi_driver.mjs), as pi's
agent session does; only the model is missing. The extension calls the real
spillvault of this environment.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.pi import CLIENT

if TYPE_CHECKING:
    from spillvault.adapters.hooks.client import Scope

TESTS = Path(__file__).resolve().parents[1]
PI_PACKAGE = TESTS / "npm" / "node_modules" / "@mariozechner" / "pi-coding-agent"
DRIVER = TESTS / "support" / "pi_driver.mjs"
SPILLVAULT = Path(sys.executable).parent / "spillvault"
HANDLE = re.compile(r"^\[tool result stored as (\S+?);")
SEQ = "seq 1 600000"


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (PI_PACKAGE / "dist" / "index.js").is_file():
        pytest.fail(
            f"pi is not installed: run `make test` (it installs Node.js and runs "
            f"`npm ci` in {TESTS / 'npm'})"
        )
    return node


class World:
    """A home, a project and pi's agent directory, with the extension installed."""

    def __init__(
        self,
        root: Path,
        spillvault: str,
        monkeypatch: pytest.MonkeyPatch,
        scope: Scope = "user",
    ) -> None:
        self.home = root / "home"
        self.project = root / "project"
        self.agent = root / "agent"
        for folder in (self.home, self.project):
            folder.mkdir()
        self.env = {**os.environ, "HOME": str(self.home)}
        self.env["PI_CODING_AGENT_DIR"] = str(self.agent)
        monkeypatch.setenv("PI_CODING_AGENT_DIR", str(self.agent))
        path = CLIENT.config_path(scope, home=self.home, project=self.project)
        change = install.plan_install(CLIENT, path, spillvault)
        install.apply(change, root / "state", installing=True)
        self.installed = path

    def drive(self, steps: list[dict[str, Any]]) -> dict[str, Any]:
        """Run the steps through pi; return its report, failing on any error."""
        done = subprocess.run(
            [_node(), str(DRIVER), str(PI_PACKAGE), str(self.project), str(self.agent)],
            input=json.dumps(steps), capture_output=True, text=True, env=self.env,
            cwd=self.project, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        report["stderr"] = done.stderr
        assert report["extensions"] == [str(self.installed)]
        assert report["errors"] == []
        assert report["handlerErrors"] == []
        return report


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(tmp_path, str(SPILLVAULT), monkeypatch)


def _text(content: list[dict[str, Any]]) -> str:
    return "\n".join(block["text"] for block in content if block["type"] == "text")


def _reads_back(handle: str, line: int) -> str:
    done = subprocess.run(
        [str(SPILLVAULT), "read", handle, "--line", str(line), "--limit", "1"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()[0]


def test_a_bash_call_is_rewritten_and_the_rewrite_stores_the_output(
    world: World,
) -> None:
    step = {"step": "tool_call", "toolName": "bash", "input": {"command": SEQ}}
    (result,) = world.drive([step])["results"]
    assert result["blocked"] is None
    command = result["input"]["command"]
    assert shlex.split(command)[:2] == [str(SPILLVAULT), "run"]
    assert shlex.split(command)[-3:] == ["bash", "-lc", SEQ]
    shown = subprocess.run(
        ["/bin/bash", "-c", command], capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout  # fmt: skip
    assert len(shown) < 40_000
    handle = HANDLE.match(shown)
    assert handle is not None, shown[:300]
    assert _reads_back(handle[1], 555_555) == "555555"


def test_pis_own_bash_tool_cuts_the_preview_and_the_result_hook_restores_it(
    world: World,
) -> None:
    (turn,) = world.drive([{"step": "turn", "input": {"command": SEQ}}])["results"]
    kept = _text(turn["executed"]["content"])
    assert "Full output: " in kept  # pi kept the last 2,000 lines of the preview
    assert HANDLE.match(kept) is None
    final = _text(turn["final"]["content"])
    assert len(final) < 40_000
    handle = HANDLE.match(final)
    assert handle is not None, final[:300]
    assert final.rstrip().endswith("600000")
    assert turn["final"]["isError"] is False
    assert _reads_back(handle[1], 123_456) == "123456"


def test_a_failing_command_keeps_its_preview_and_its_status(world: World) -> None:
    command = f"{SEQ}; false"
    (turn,) = world.drive([{"step": "turn", "input": {"command": command}}])["results"]
    assert turn["input"]["command"] != command
    assert turn["executed"]["isError"] is True
    final = _text(turn["final"]["content"])
    assert turn["final"]["isError"] is True
    assert len(final) < 40_000
    assert HANDLE.match(final) is not None, final[:300]
    assert final.endswith("\n\nCommand exited with code 1")


def test_a_5_mb_tool_result_becomes_a_preview_with_a_handle(world: World) -> None:
    output = "".join(f"result line {n}\n" for n in range(1, 330_001))
    assert len(output) > 5_000_000
    step = {
        "step": "tool_result", "toolName": "read", "input": {"path": "big.log"},
        "content": [{"type": "text", "text": output}], "details": None,
    }  # fmt: skip
    (result,) = world.drive([step])["results"]
    shown = _text(result["patch"]["content"])
    assert len(shown) <= 30_000
    handle = HANDLE.match(shown)
    assert handle is not None, shown[:300]
    assert _reads_back(handle[1], 300_000) == "result line 300000"


def test_a_failing_spillvault_leaves_every_call_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path, str(tmp_path / "missing" / "spillvault"), monkeypatch)
    big = "x" * 100_000
    report = world.drive([
        {"step": "tool_call", "toolName": "bash", "input": {"command": "seq 1 3"}},
        {"step": "tool_result", "toolName": "read", "input": {"path": "a"},
         "content": [{"type": "text", "text": big}], "details": None},
    ])  # fmt: skip
    call, result = report["results"]
    assert call == {"blocked": None, "input": {"command": "seq 1 3"}}
    assert result == {"patch": None}
    lines = report["stderr"].splitlines()
    warnings = [line for line in lines if line.startswith("spillvault: ")]
    assert len(warnings) == 2, lines
    assert "ENOENT" in warnings[0]


def test_pi_loads_the_extension_installed_in_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path, str(SPILLVAULT), monkeypatch, scope="project")
    assert world.installed == world.project / ".pi" / "extensions" / "spillvault.ts"
    step = {"step": "tool_call", "toolName": "bash", "input": {"command": "ls"}}
    (result,) = world.drive([step])["results"]
    assert shlex.split(result["input"]["command"])[:2] == [str(SPILLVAULT), "run"]
