"""The real Gemini CLI with spillvault's hooks: what its model sees of 5 MB.

`gemini` is @google/gemini-cli 0.61.0 from tests/npm (`npm ci` by `make
test`), run offline: `--fake-responses-non-strict` scripts a model whose one
answer calls a tool. The tool and the hooks run for real; the CLI then asks
the scripted model again, finds no answer, and writes that request -- the
tool's result exactly as the model would get it -- to
`$TMPDIR/gemini-client-error-Turn.run-sendMessageStream-<time>.json`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spillvault.adapters.hooks.client import hook_command
from spillvault.adapters.hooks.gemini import CLIENT

NPM_DIR = Path(__file__).resolve().parents[1] / "npm"
GEMINI = NPM_DIR / "node_modules" / ".bin" / "gemini"
SPILLVAULT = Path(sys.executable).parent / "spillvault"
MODEL_LIMIT = 40_000
HANDLE = re.compile(r"\[tool result stored as (\S+?);")
SETTINGS = {"security": {"auth": {"selectedType": "gemini-api-key"}}}


@dataclass(frozen=True)
class Gemini:
    """A home with our hooks installed, a trusted project, and the CLI's environment."""

    home: Path
    project: Path
    reports: Path
    env: dict[str, str]


@pytest.fixture
def gemini(tmp_path: Path) -> Gemini:
    """Gemini CLI's user settings hold our hooks, pointing at this spillvault."""
    if shutil.which("node") is None or not GEMINI.is_file():
        pytest.fail(
            f"Gemini CLI is not installed: run `make test` (it installs Node.js "
            f"and runs `npm ci` in {NPM_DIR})"
        )
    home, project, reports = (tmp_path / f"gemini-{n}" for n in ("home", "work", "tmp"))
    for folder in (home, project, reports):
        folder.mkdir()
    settings = CLIENT.config_path("user", home=home, project=project)
    settings.parent.mkdir()
    command = hook_command(str(SPILLVAULT), CLIENT.name, CLIENT.events[0])
    settings.write_text(CLIENT.install(json.dumps(SETTINGS), command))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TMPDIR": str(reports),
        "SHELL": "/bin/bash",
        "TERM": "dumb",
        "GEMINI_API_KEY": "offline",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "SPILLVAULT_HOME": os.environ["SPILLVAULT_HOME"],
    }
    return Gemini(home, project, reports, env)


def _model_sees(gemini: Gemini, name: str, args: dict[str, Any], *flags: str) -> str:
    """Script one call of tool `name`; return the result the model would read next."""
    call = {"functionCall": {"name": name, "args": args}}
    answer = {"candidates": [{"content": {"role": "model", "parts": [call]},
                              "finishReason": "STOP", "index": 0}]}  # fmt: skip
    script = gemini.reports / "fake.jsonl"
    line = {"method": "generateContentStream", "response": [answer]}
    script.write_text(json.dumps(line) + "\n")
    done = subprocess.run(
        [str(GEMINI), "-p", "go", "--fake-responses-non-strict", str(script), *flags],
        cwd=gemini.project, env=gemini.env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    reports = sorted(gemini.reports.glob("gemini-client-error-Turn.run-*.json"))
    assert reports, f"no second model request:\n{done.stdout}\n{done.stderr[-3000:]}"
    message = json.loads(reports[-1].read_text())["error"]["message"]
    request = json.loads(message.split("got request:\n", 1)[1])
    (part,) = request["contents"][-1]["parts"]
    response = part["functionResponse"]
    assert response["name"] == name  # a tail call answers as the tool called
    output: str = response["response"]["output"]
    return output


def _handle(output: str) -> str:
    assert len(output) < MODEL_LIMIT
    match = HANDLE.search(output)
    assert match is not None, output[:500]
    return match[1]


def _line(gemini: Gemini, handle: str, number: int) -> str:
    read = [str(SPILLVAULT), "read", handle, "--line", str(number), "--limit", "1"]
    done = subprocess.run(
        read, env=gemini.env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.splitlines()[0]


def test_a_5_mb_shell_command_is_wrapped_and_read_back_by_its_handle(
    gemini: Gemini,
) -> None:
    """BeforeTool runs it under `spillvault run`: the model sees the preview."""
    args = {"command": "seq 1 600000 | cat", "description": "count"}
    output = _model_sees(gemini, "run_shell_command", args, "--yolo")
    handle = _handle(output)
    assert "[command: bash -lc 'seq 1 600000 | cat'; exit: 0;" in output
    assert "modified by a hook" in output
    assert _line(gemini, handle, 555_555) == "555555"


def test_a_5_mb_command_gemini_runs_unasked_is_gated_after_it_ran(
    gemini: Gemini,
) -> None:
    """A read-only command stays as written; AfterTool's tail call shows a preview."""
    args = {"command": "seq 1 600000", "description": "count"}
    output = _model_sees(gemini, "run_shell_command", args, "--yolo")
    handle = _handle(output)
    assert "modified by a hook" not in output
    assert re.search(
        r"\n600000\nProcess Group PGID: \d+\n</untrusted_context>$", output
    )
    # The stored result is the tool's whole text: Gemini's frame, then the lines.
    assert _line(gemini, handle, 1) == "<untrusted_context>"
    assert _line(gemini, handle, 555_556) == "555555"
    previews = list((gemini.home / ".gemini" / "tmp").glob("*/spillvault/*/*.txt"))
    assert [p.read_text() for p in previews] == [output]


def test_a_5_mb_read_file_is_replaced_without_yolo(gemini: Gemini) -> None:
    """Default approval: the tail call is a read_file the policy allows unasked."""
    big = gemini.project / "big.log"
    big.write_text("".join(f"{n}\n" for n in range(1, 600_001)))
    args = {"file_path": "big.log", "start_line": 1, "end_line": 600_001}
    output = _model_sees(gemini, "read_file", args)
    handle = _handle(output)
    assert output.startswith(f"[tool result stored as {handle}; tool: read_file;")
    assert _line(gemini, handle, 555_555) == "555555"
