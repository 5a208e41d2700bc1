"""Every client, end to end as far as its hooks allow: a 5 MB shell output, gated.

For each client that rewrites shell commands, the hook is installed into a
fresh home, its command line is taken from the client's own configuration
and run as clients run hooks (`sh -c`, the client's stdin JSON), the rewrite
it answers runs in bash, and the model-visible output must be a bounded
preview whose handle pages back the exact lines through the MCP tools.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spillvault.adapters.hooks import install
from spillvault.adapters.hooks.registry import CLIENT_MODULES, client_named
from spillvault.adapters.mcp.artifact_tools import ArtifactTools
from spillvault.adapters.mcp.limits import mcp_policy

SPILLVAULT = str(Path(sys.executable).parent / "spillvault")
COMMAND = "seq 1 500000 | sed 's/^/row /'"
HANDLE = re.compile(r"\[tool result stored as (\S+?);")
SHELL_CLIENTS = [
    name
    for name in sorted(CLIENT_MODULES)
    if client_named(name).shell_event is not None
]


def test_every_client_but_opencode_rewrites_shell_commands() -> None:
    """OpenCode checks permissions on the command text after its hook: no rewrite."""
    assert SHELL_CLIENTS == ["claude-code", "codex", "cursor", "gemini", "pi"]


@pytest.mark.parametrize("name", SHELL_CLIENTS)
def test_a_5_mb_shell_output_reaches_the_model_as_a_preview_that_pages_back(
    name: str, tmp_path: Path
) -> None:
    """Installed hook, client stdin, rewrite, bounded preview, exact lines by handle."""
    client = client_named(name)
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash"}
    for moved in ("XDG_CONFIG_HOME", "CODEX_HOME", "PI_CODING_AGENT_DIR"):
        env.pop(moved, None)
    config = client.config_path("project", home=home, project=project)
    install.apply(install.plan_install(client, config, SPILLVAULT), tmp_path / "state",
                  installing=True)  # fmt: skip
    hook = client.hook_commands(config.read_text())[client.shell_event or ""]
    answer = subprocess.run(
        ["/bin/sh", "-c", hook],
        input=json.dumps(client.shell_canary(COMMAND, str(project))),
        capture_output=True, text=True, cwd=project, env=env, timeout=120, check=True,
    )  # fmt: skip
    assert client.check(client.shell_event or "", answer.stdout.strip()) == []
    rewritten = client.rewritten(answer.stdout.strip())
    assert rewritten is not None
    shown = subprocess.run(
        ["/bin/bash", "-c", rewritten],
        capture_output=True, text=True, cwd=project, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert shown.returncode == 0
    assert len(shown.stdout) <= 30_000
    match = HANDLE.search(shown.stdout)
    assert match is not None
    tools = ArtifactTools(mcp_policy())
    try:
        page = tools.call("read_artifact", {"handle": match[1], "start_line": 444_444,
                                            "limit": 2})  # fmt: skip
        assert page.text.splitlines()[1:3] == [
            "444444: row 444444",
            "444445: row 444445",
        ]
        found = tools.call(
            "grep_artifact", {"handle": match[1], "pattern": "row 499999"}
        )
        assert found.text.splitlines()[1:] == ["499999: row 499999"]
    finally:
        tools.close()
