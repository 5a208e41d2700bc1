"""Sessions under one root; a handle finds its session from anywhere (issue 15 §1)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from spillvault import new_session_dir, new_session_id, open_session, session_root
from spillvault.adapters.storage.session_root import MAX_PREFIX_LENGTH
from spillvault.domain.errors import ArtifactAccessError
from spillvault.domain.handles import MAX_HANDLE_LENGTH, parse_handle

if TYPE_CHECKING:
    from pathlib import Path

SCRIPT = os.path.join(os.path.dirname(sys.executable), "spillvault")
LOG = "for i in $(seq 1 40000); do echo \"line $i\"; done; echo 'ERROR boom'"


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_run_makes_a_new_session_under_the_root_and_a_handle_works_anywhere(
    tmp_path: Path, session_root: Path
) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    done = cli("run", "--json", "--", "bash", "-c", LOG, cwd=work)
    assert done.returncode == 0, done.stderr
    handle = json.loads(done.stdout)["artifact"]["handle"]
    parsed = parse_handle(handle)
    assert parsed is not None
    assert parsed.number == 1
    assert len(handle) <= MAX_HANDLE_LENGTH
    assert re.fullmatch(r"[a-z2-7]{13}", parsed.session_id)
    assert (session_root / parsed.session_id / "session.json").is_file()
    assert not list(work.iterdir())  # nothing in the working directory
    # the view the model saw names exactly this handle
    assert f"full output: {handle};" in json.loads(done.stdout)["content"]
    # read and grep from another directory, with no flags
    read = cli("read", handle, "--line", "40001", "--limit", "1", cwd=elsewhere)
    assert read.returncode == 0, read.stderr
    assert read.stdout == "ERROR boom\n"
    grep = cli("grep", handle, "ERROR", cwd=elsewhere)
    assert grep.stdout == "40001:ERROR boom\n"
    # a second run is a second session; ls lists both, oldest first
    again = cli("run", "--json", "--", "echo", "small", cwd=work)
    second = json.loads(again.stdout)
    assert second["artifact"] is None  # under the limit: nothing stored
    listed = cli("ls", "-q", cwd=elsewhere)
    assert listed.stdout.split() == [handle]


def test_a_session_by_id_by_directory_and_by_environment(
    tmp_path: Path, session_root: Path
) -> None:
    run = ("--json", "--", "bash", "-c", LOG)
    done = cli("run", "--session", "team-a", *run, cwd=tmp_path)
    handle = json.loads(done.stdout)["artifact"]["handle"]
    assert handle == "team-a/1"
    assert (session_root / "team-a" / "session.json").is_file()
    # an id is a name under the root; a value with a '/' is a directory
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    local = outside / "local"
    done = cli("run", "--session", "./local", *run, cwd=outside)
    local_handle = json.loads(done.stdout)["artifact"]["handle"]
    assert local_handle == "local/1"
    assert (local / "session.json").is_file()
    # outside the root, $SPILLVAULT_SESSION names where the handle's session is
    env = {"SPILLVAULT_SESSION": str(local)}
    read = cli("read", local_handle, "--limit", "1", cwd=session_root, env=env)
    assert read.stdout == "line 1\n[more: --line 2 --limit 1]\n"
    # ...and does not capture another session's handle
    other = cli("read", handle, "--limit", "1", cwd=tmp_path, env=env)
    assert other.returncode == 0, other.stderr
    missing = cli("read", local_handle, "--limit", "1", cwd=tmp_path)
    assert missing.returncode == 3
    assert "no session 'local' under " in missing.stderr
    assert "--session DIR" in missing.stderr
    # --session wins, and a handle of another session is refused by name
    wrong = cli("read", handle, "--session", str(local), cwd=tmp_path)
    assert wrong.returncode == 3
    assert "belongs to session 'team-a', not 'local'" in wrong.stderr
    for bad in ("team-a/01", "team-a/x", "team-a", "/etc/passwd"):
        refused = cli("read", bad, cwd=tmp_path)
        assert refused.returncode == 3, (bad, refused.stderr)
        assert "Traceback" not in refused.stderr


def test_the_root_follows_spillvault_home_then_xdg_state_home() -> None:
    assert session_root({"SPILLVAULT_HOME": "/srv/sv"}) == "/srv/sv"
    assert session_root({"XDG_STATE_HOME": "/x"}) == "/x/spillvault"
    home = os.path.expanduser("~")
    # the XDG spec: a relative value is invalid and ignored
    assert session_root({"XDG_STATE_HOME": "rel"}) == f"{home}/.local/state/spillvault"
    assert session_root({}) == f"{home}/.local/state/spillvault"


def test_generated_ids_are_unique_short_and_prefixable(session_root: Path) -> None:
    ids = {new_session_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[a-z2-7]{13}", i) for i in ids)
    named = new_session_id("run-42")
    assert re.fullmatch(r"run-42-[a-z2-7]{13}", named)
    longest = new_session_id("p" * MAX_PREFIX_LENGTH)
    assert len(f"{longest}/999999999999") == MAX_HANDLE_LENGTH
    for bad in ("", "-x", "a/b", "a:b", "a b", "p" * (MAX_PREFIX_LENGTH + 1)):
        with pytest.raises(ArtifactAccessError, match="prefix"):
            new_session_id(bad)
    directory = new_session_dir("run-42")
    assert os.path.dirname(directory) == str(session_root)
    with open_session(directory) as session:
        outcome = session.externalizer.process("x\n" * 40_000, "bash")
        assert outcome.artifact is not None
        assert outcome.artifact.handle == f"{os.path.basename(directory)}/1"


def test_a_new_session_id_too_long_for_short_handles_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArtifactAccessError, match="at most 51"):
        open_session(tmp_path / ("n" * 52))
    assert not (tmp_path / ("n" * 52)).exists()
    open_session(tmp_path / ("n" * 51)).close()
