"""OpenCode's plugin file, as `spillvault hook install opencode` writes it, under Node.

OpenCode itself is not installed (a 177 MB binary that npm-installs into its
config directories at startup): tests/support/opencode_driver.mjs imports
the installed file and calls its `tool.execute.after` with `(input, output)`
objects shaped as OpenCode 1.18.33 passes them, and reports what the hook
left in `output`. The plugin calls the real spillvault of this environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.opencode import AFTER, CLIENT

TESTS = Path(__file__).resolve().parents[1]
DRIVER = TESTS / "support" / "opencode_driver.mjs"
SPILLVAULT = Path(sys.executable).parent / "spillvault"
HANDLE = re.compile(r"^\[tool result stored as (\S+?);")
SESSION = "ses_dcbd30e71ffeg71icroOkhWCAu"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is not installed: run `make test` (it installs it)")
    return node


def _drive(plugin: Path, steps: list[dict[str, Any]]) -> dict[str, Any]:
    done = subprocess.run(
        [_node(), str(DRIVER), str(plugin)], input=json.dumps(steps),
        capture_output=True, text=True, env=dict(os.environ), timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    report["stderr"] = done.stderr
    assert report["exports"] == {"SpillvaultPlugin": "function"}
    assert report["hooks"] == [AFTER]
    return report


def _installed(project: Path, spillvault: str) -> Path:
    path = CLIENT.config_path("project", home=project / "home", project=project)
    change = install.plan_install(CLIENT, path, spillvault)
    install.apply(change, project / "state", installing=True)
    return path


def _step(tool: str, output: dict[str, Any]) -> dict[str, Any]:
    call = {"tool": tool, "sessionID": SESSION, "callID": "call_1", "args": {}}
    return {"hook": AFTER, "input": call, "output": output}


def _builtin(tool: str, text: str, **metadata: Any) -> dict[str, Any]:
    meta = {"output": text, **metadata}
    return _step(tool, {"title": tool, "output": text, "metadata": meta})


def _reads_back(handle: str, line: int) -> str:
    done = subprocess.run(
        [str(SPILLVAULT), "read", handle, "--line", str(line), "--limit", "1"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()[0]


def test_the_plugin_applies_spillvaults_answers(tmp_path: Path) -> None:
    plugin = _installed(tmp_path, str(SPILLVAULT))
    whole = "".join(f"{n}\n" for n in range(1, 200_001))
    saved = tmp_path / "tool_2342a2ad9001vVwSwdJvvv4ik5"
    saved.write_text(whole)
    kept = (
        f"...output truncated...\n\nFull output saved to: {saved}\n\n{whole[-14_000:]}"
    )
    read = "".join(f"{n}: line {n}\n" for n in range(1, 3_001))
    image = {"type": "image", "data": "aGk=", "mimeType": "image/png"}
    mcp = "".join(f"mcp line {n}\n" for n in range(1, 400_001))
    small = _builtin("bash", "ok\n", exit=0, truncated=False)
    report = _drive(plugin, [
        small,
        _builtin("bash", kept, exit=0, truncated=True, outputPath=str(saved)),
        _builtin("read", read, truncated=False),
        _step("srv_dump", {"content": [{"type": "text", "text": mcp}, image]}),
        _step("srv_odd", {"title": "no output, no content"}),
    ])  # fmt: skip
    assert all(result["threw"] is None for result in report["results"])
    assert report["stderr"] == ""
    untouched, cut, long_read, from_mcp, odd = (r["output"] for r in report["results"])
    assert untouched == small["output"]
    assert odd == {"title": "no output, no content"}

    bash_handle = HANDLE.match(cut["output"])
    assert bash_handle is not None, cut["output"][:300]
    assert len(cut["output"]) <= 30_000
    assert cut["metadata"] == {
        "output": kept, "exit": 0, "truncated": True, "outputPath": str(saved),
    }  # fmt: skip
    assert _reads_back(bash_handle[1], 123_456) == "123456"

    assert HANDLE.match(long_read["output"]) is not None

    text, *others = from_mcp["content"]
    assert others == [image]
    mcp_handle = HANDLE.match(text["text"])
    assert mcp_handle is not None, text["text"][:300]
    assert _reads_back(mcp_handle[1], 399_999) == "mcp line 399999"
    assert mcp_handle[1].startswith(f"opencode-{SESSION}/")


def test_a_failing_spillvault_leaves_the_output_as_it_was(tmp_path: Path) -> None:
    plugin = _installed(tmp_path, str(tmp_path / "missing" / "spillvault"))
    big = "x" * 100_000
    report = _drive(plugin, [_builtin("read", big, truncated=False)])
    (result,) = report["results"]
    assert result["threw"] is None
    assert result["output"]["output"] == big
    lines = report["stderr"].splitlines()
    (warning,) = [line for line in lines if line.startswith("spillvault")]
    assert warning.startswith("spillvault (OpenCode plugin): read: ")
    assert "ENOENT" in warning
