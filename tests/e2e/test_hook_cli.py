"""`spillvault hook` for Claude Code, as a user runs it: install to doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spillvault.adapters.mcp.artifact_tools import ArtifactTools
from spillvault.adapters.mcp.limits import mcp_policy

SPILLVAULT = Path(sys.executable).parent / "spillvault"
USER_SETTINGS = """{
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test:*)"]},
    "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}
}
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A home directory whose Claude Code settings hold a user's own choices."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text(USER_SETTINGS)
    (tmp_path / "project").mkdir()
    return home


def _run(
    home: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(
        [str(SPILLVAULT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=home.parent / "project",
        timeout=300,
        check=False,
    )


def _settings(home: Path) -> Path:
    return home / ".claude" / "settings.json"


def test_install_twice_then_uninstall_gives_back_the_very_file(home: Path) -> None:
    """Install adds our two groups and keeps the rest; uninstall restores every byte."""
    dry = _run(home, "hook", "install", "claude-code", "--dry-run")
    assert dry.returncode == 0
    assert '"matcher": "Bash"' in dry.stdout
    assert _settings(home).read_text() == USER_SETTINGS
    assert _run(home, "hook", "install", "claude-code").returncode == 0
    installed = json.loads(_settings(home).read_text())
    assert installed["model"] == "opus"
    assert installed["hooks"]["Stop"] == json.loads(USER_SETTINGS)["hooks"]["Stop"]
    pre = installed["hooks"]["PreToolUse"][0]["hooks"][0]
    assert pre["command"] == f"{SPILLVAULT} hook run claude-code PreToolUse"
    assert pre["timeout"] == 30
    first = _settings(home).read_text()
    again = _run(home, "hook", "install", "claude-code")
    assert "nothing to install" in again.stdout
    assert _settings(home).read_text() == first
    status = _run(home, "hook", "status", "claude-code").stdout.splitlines()
    assert status[0].split()[:3] == ["claude-code", "user", "installed"]
    assert status[1].split()[:4] == ["claude-code", "project", "not", "installed"]
    assert _run(home, "hook", "uninstall", "claude-code").returncode == 0
    assert _settings(home).read_text() == USER_SETTINGS


def test_uninstall_after_the_user_edited_takes_out_only_ours(home: Path) -> None:
    """A file changed since installing keeps the change; only our entries go."""
    _run(home, "hook", "install", "claude-code")
    data = json.loads(_settings(home).read_text())
    data["theme"] = "dark"
    _settings(home).write_text(json.dumps(data))
    _run(home, "hook", "uninstall", "claude-code")
    left = json.loads(_settings(home).read_text())
    assert left == {**json.loads(USER_SETTINGS), "theme": "dark"}


def test_a_file_it_cannot_parse_is_never_touched(home: Path) -> None:
    """Broken JSON: a clear refusal, exit 4, the file as it was, no backup."""
    _settings(home).write_text('{"model": "opus",')
    done = _run(home, "hook", "install", "claude-code")
    assert done.returncode == 4
    assert "is not valid JSON" in done.stderr
    assert _settings(home).read_text() == '{"model": "opus",'
    assert not (home / ".claude" / "settings.json.spillvault.bak").exists()


def test_doctor_proves_the_installed_hook_gates_a_5_mb_output(home: Path) -> None:
    """The canary runs through the installed command line and reads back by handle."""
    missing = _run(home, "hook", "doctor", "claude-code")
    assert missing.returncode == 1
    assert "no spillvault hook" in missing.stdout
    _run(home, "hook", "install", "claude-code")
    done = _run(home, "hook", "doctor", "claude-code")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout
    assert "spillvault read claude-spillvault-doctor/1 --line 123456: " in done.stdout
    assert "PostToolUse: a 5 MB tool result becomes a" in done.stdout
    assert "note  " in done.stdout


def _wrapped(home: Path, command: str) -> str:
    event = {
        "session_id": "e2e-session",
        "cwd": str(home.parent / "project"),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "x"},
    }
    done = _run(
        home, "hook", "run", "claude-code", "PreToolUse", stdin=json.dumps(event)
    )
    assert done.returncode == 0
    answer: dict[str, Any] = json.loads(done.stdout)
    return str(answer["hookSpecificOutput"]["updatedInput"]["command"])


def test_a_wrapped_5_mb_command_shows_a_preview_whose_handle_reads_back(
    home: Path,
) -> None:
    """What Claude Code would run: under its 30,000-character limit, exact by handle."""
    command = _wrapped(home, "seq 1 700000; echo done >&2; sh -c 'exit 3'")
    shown = subprocess.run(
        ["/bin/bash", "-c", command],
        capture_output=True, text=True, env={**os.environ, "HOME": str(home)},
        timeout=300, check=False,
    )  # fmt: skip
    assert shown.returncode == 3  # the command's own status
    assert len(shown.stdout) <= 30_000
    assert "[tool result stored as claude-e2e-session/1;" in shown.stdout
    tools = ArtifactTools(mcp_policy())
    page = tools.call("read_artifact", {"handle": "claude-e2e-session/1",
                                        "start_line": 654321, "limit": 1})  # fmt: skip
    assert page.text.splitlines()[1] == "654321: 654321"
    found = tools.call("grep_artifact", {"handle": "claude-e2e-session/1",
                                         "pattern": "done"})  # fmt: skip
    assert found.text.splitlines()[1:] == ["700001: done"]
    tools.close()


def test_the_hook_answers_within_a_fraction_of_a_tool_call(home: Path) -> None:
    """The hot path imports nothing heavy: no session, no store, no argparse."""
    probe = (
        "import sys, runpy; sys.argv = ['spillvault', 'hook', 'run', 'claude-code', "
        "'PreToolUse']; sys.stdin = __import__('io').StringIO('{}'); "
        "from spillvault.adapters.cli.launcher import main; main(); "
        "heavy = [m for m in ('argparse', 'eventsourcing', 'sqlite3', 'hyperscan', "
        "'spillvault.adapters.session') if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
        check=False, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_reinstall_keeps_the_first_backup_so_uninstall_gives_the_original(
    home: Path,
) -> None:
    """Installing again (another spillvault, say) never backs up our own entries."""
    _run(home, "hook", "install", "claude-code")
    installed = json.loads(_settings(home).read_text())
    installed["hooks"]["PreToolUse"][0]["hooks"][0]["command"] = (
        "/old/spillvault hook run claude-code PreToolUse"
    )
    _settings(home).write_text(json.dumps(installed))
    _run(home, "hook", "install", "claude-code")
    assert "/old/spillvault" not in _settings(home).read_text()
    _run(home, "hook", "uninstall", "claude-code")
    assert _settings(home).read_text() == USER_SETTINGS


def test_status_says_what_codex_still_needs_before_it_runs_the_hook(home: Path) -> None:
    """Codex skips an untrusted hook silently: status says so, until it is trusted."""
    _run(home, "hook", "install", "codex")
    lines = _run(home, "hook", "status", "codex").stdout.splitlines()
    assert lines[0].split()[:3] == ["codex", "user", "installed"]
    assert "NOT READY" in lines[1]
    assert "open /hooks and trust it" in lines[1]
    hooks_json = home / ".codex" / "hooks.json"
    (home / ".codex" / "config.toml").write_text(
        f'[hooks.state."{hooks_json}:pre_tool_use:0:0"]\ntrusted_hash = "abc"\n'
    )
    trusted = _run(home, "hook", "status", "codex").stdout.splitlines()
    assert trusted[1].split()[0] == "ok"
    assert "the hook is trusted" in trusted[1]


def test_a_reader_that_leaves_early_gets_no_complaint(home: Path) -> None:
    """`spillvault … | true`: quiet, as any Unix tool whose reader left."""
    env = {**os.environ, "HOME": str(home)}
    _run(home, "run", "--session", "pipe", "--", "seq", "1", "200000")
    # `true` reads nothing and is gone long before spillvault writes.
    for command in ("ls", "read pipe/1", "hook status"):
        done = subprocess.run(
            ["/bin/bash", "-c", f"'{SPILLVAULT}' {command} | true"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert done.stderr == "", command
