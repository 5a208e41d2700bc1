"""`spillvault demo --keep`: the kept session opens with the other commands."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spillvault.adapters.cli.demo import FAILURE_LINE, _grep_output

SCRIPT = str(Path(sys.executable).parent / "spillvault")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, check=False, timeout=60
    )


def cli_json(*args: str) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def demo_events(*args: str) -> list[dict[str, Any]]:
    done = cli("demo", "--json", *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty $SPILLVAULT_HOME apart from --dir: the demo session is not in it."""
    path = tmp_path / "home"
    monkeypatch.setenv("SPILLVAULT_HOME", str(path))
    return path


def test_kept_session_opens_with_ls_read_grep_and_journal_verify(
    tmp_path: Path, home: Path
) -> None:
    parent = tmp_path / "demo"
    parent.mkdir()
    kept = demo_events("--keep", "--dir", str(parent))[-1]
    assert kept["event"] == "keep"
    session = kept["path"]
    assert Path(session).parent.parent == parent
    stored = _grep_output()
    lines = stored.splitlines()

    listed = cli_json("ls", "--session", session)["artifacts"]
    assert [(a["handle"], a["state"]) for a in listed] == [
        (f"demo-session/{n}", "sealed") for n in (1, 2, 3, 4)
    ]  # GC's planted orphan went to the copy, not here
    grep_row = listed[0]
    assert grep_row["line_count"] == len(lines)
    assert grep_row["size_bytes"] == len(stored.encode())
    digest = hashlib.sha256(stored.encode()).hexdigest()
    assert digest.startswith(grep_row["sha256_prefix"])
    handle = grep_row["handle"]
    page = cli_json("read", handle, "--session", session, "--line", "1", "--limit", "5")
    assert page["text"].splitlines() == lines[:5]
    at = str(FAILURE_LINE)
    page = cli_json("read", handle, "--session", session, "--line", at, "--limit", "1")
    assert page["text"] == lines[FAILURE_LINE - 1]
    found = cli_json("grep", handle, "AssertionError", "--session", session)
    assert [m["line_number"] for m in found["matches"]] == [FAILURE_LINE]
    assert cli_json("journal", "verify", "--session", session)["ok"] is True
    verified = cli("journal", "verify", "--session", session)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("journal ok: 5 records")

    # What the demo prints is ready to paste, and every command of it works.
    verify = ["spillvault", "journal", "verify", "--session", session]
    assert shlex.split(kept["commands"][-1]) == verify
    for command in kept["commands"]:
        program, *args = shlex.split(command)
        assert program == "spillvault"
        done = cli(*args)
        assert done.returncode == 0, (command, done.stderr)
    assert not home.exists()


def test_kept_session_has_no_copy_or_tampering_left_and_stays_private(
    tmp_path: Path, home: Path
) -> None:
    kept = demo_events("--keep", "--dir", str(tmp_path))[-1]
    session = Path(kept["path"])
    assert {p.name for p in session.parent.iterdir()} == {
        "demo-session",
        "memory.sqlite3",  # the demo's memory owner, which holds the live lease
    }
    assert (session / "events.sqlite3").is_file()
    assert sorted(p.name for p in (session / "tool-results").iterdir()) == [
        f"tool_result_00{n}.txt" for n in (1, 2, 3, 4)
    ]
    assert list((session / ".quarantine").iterdir()) == []
    for root, dirs, files in os.walk(session.parent):
        for name in dirs:
            assert stat.S_IMODE(os.lstat(Path(root, name)).st_mode) == 0o700, name
        for name in files:
            info = os.lstat(Path(root, name))
            assert stat.S_ISREG(info.st_mode), name
            assert stat.S_IMODE(info.st_mode) == 0o600, name
    assert stat.S_IMODE(session.parent.stat().st_mode) == 0o700
    assert not home.exists()


def test_without_keep_the_copy_is_damaged_and_nothing_is_left(
    tmp_path: Path, home: Path
) -> None:
    events = demo_events("--dir", str(tmp_path))
    tags = [event["event"] for event in events]
    assert "keep" not in tags
    assert tags.index("microcompact") < tags.index("copy") < tags.index("gc")
    assert tags.index("gc apply") < tags.index("tamper") < tags.index("refused")
    assert tags[-1] == "summary"
    assert not home.exists()
    assert list(tmp_path.iterdir()) == []
