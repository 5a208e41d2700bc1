"""Only `run` creates a session: every other command needs an existing one (S4.4).

A read, a listing, a journal check or a GC on a directory that holds no
session (a home directory, a mistyped `--session`) must fail with "no
spillvault session at PATH" and leave the filesystem exactly as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.session import MARKER_NAME, open_session
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactLeaseJournalError,
    ArtifactSessionNotFoundError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

SCRIPT = str(Path(sys.executable).parent / "spillvault")
HANDLE = "tool-results/tool_result_001.txt"


def listing(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under `root` with its mode, size and (for files) its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        found[str(path.relative_to(root))] = (info.st_mode, info.st_size, data)
    return found


def commands(session: Path, owner: Path) -> dict[str, list[str]]:
    """Every command but `run` and `demo`, aimed at `session`."""
    at = ["--session", str(session)]
    return {
        "read": ["read", *at, str(session / HANDLE)],
        "read-by-handle": ["read", str(session / HANDLE)],
        "grep": ["grep", *at, str(session / HANDLE), "x"],
        "grep-by-handle": ["grep", str(session / HANDLE), "x"],
        "ls": ["ls", *at],
        "journal-verify": ["journal", "verify", *at],
        "journal-repair": ["journal", "repair", *at],
        "reconcile": ["reconcile", *at, "--owner", f"sqlite:{owner}"],
        "lease-resolve": [
            *("lease", "resolve", *at, "tx-1", "--owner", f"sqlite:{owner}"),
            *("--abort", "--reason", "test"),
        ],
        "gc": ["gc", *at],
        "gc-apply": ["gc", *at, "--apply"],
    }


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A private directory a user owns, with something of theirs in it."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "notes.txt").write_text("mine\n")
    return home


@pytest.fixture
def owner(tmp_path: Path) -> Path:
    """An existing owner, so `reconcile` and `lease resolve` reach the session."""
    path = tmp_path / "owner.sqlite3"
    SQLiteOwner(path)
    return path


TARGETS: dict[str, Callable[[Path], Path]] = {
    "a directory that is no session": lambda home: home,
    "a mistyped session in an existing directory": lambda home: home / "sesion-a",
    "a session under a missing directory": lambda home: home / "typo" / "session-a",
}


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize(
    "command",
    sorted(commands(Path("/s"), Path("/o"))),
)
def test_no_command_but_run_creates_a_session(
    home: Path,
    owner: Path,
    target: str,
    command: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = TARGETS[target](home)
    argv = commands(session, owner)[command]
    before = listing(home.parent)
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith("spillvault: ArtifactSessionNotFoundError: ")
    assert f"no spillvault session at {session}" in err
    assert listing(home.parent) == before
    assert not session.exists() or session == home


@pytest.mark.parametrize(
    "argv", [["ls"], ["journal", "verify"], ["journal", "repair"], ["gc", "--apply"]]
)
def test_no_session_is_created_when_none_is_chosen(
    tmp_path: Path,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    root = tmp_path / "root"
    monkeypatch.chdir(work)
    monkeypatch.setenv("SPILLVAULT_HOME", str(root))
    before = listing(tmp_path)
    # ls lists every session under the root (none); the others need a session
    assert cli_main(argv) == (0 if argv == ["ls"] else 3)
    out, err = capsys.readouterr()
    if argv == ["ls"]:
        assert out == "no artifacts\n"
    else:
        assert "no session chosen: pass --session DIR|ID or set " in err
        assert f"$SPILLVAULT_SESSION (sessions live under {root})" in err
    assert listing(tmp_path) == before


def test_a_read_in_a_home_directory_fails_cleanly_end_to_end(home: Path) -> None:
    before = listing(home)
    done = subprocess.run(
        [SCRIPT, "read", str(home / HANDLE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 3, done
    assert done.stderr.startswith(
        f"spillvault: ArtifactSessionNotFoundError: no spillvault session at {home}"
    )
    assert "Traceback" not in done.stderr
    assert listing(home) == before


def test_run_still_creates_its_session_to_store_an_output(tmp_path: Path) -> None:
    session = tmp_path / "session-a"
    assert cli_main(["run", "--session", str(session), "--", "true"]) == 0
    assert not session.exists()  # a short output needs no session (issue 19)
    assert cli_main(["run", "--session", str(session), "--", "seq", "30000"]) == 0
    assert (session / MARKER_NAME).is_file()


def test_the_commands_work_on_an_existing_session(
    session_dir: Path, owner: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_session(session_dir) as session:
        session.externalizer.externalize("line\n" * 9000, "bash")
    argv = commands(session_dir, owner)
    assert cli_main(argv["ls"]) == 0
    assert f"{session_dir.name}/1 " in capsys.readouterr().out
    assert cli_main(argv["read"]) == 0
    assert cli_main(argv["journal-verify"]) == 0
    assert "journal ok: 0 records" in capsys.readouterr().out
    assert cli_main(argv["gc"]) == 0


def test_journal_repair_does_not_claim_a_file_it_did_not_keep(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    open_session(session_dir).close()
    before = sorted(os.listdir(session_dir))
    assert cli_main(["journal", "repair", "--session", str(session_dir)]) == 0
    out = capsys.readouterr().out
    assert "kept as" not in out
    assert "no journal to keep aside" in out
    assert sorted(os.listdir(session_dir)) == sorted(
        [*before, "retention-leases.jsonl"]
    )


# --------------------------------------------------------------------- library


@pytest.mark.parametrize("mode", ["open", "read"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_opening_an_existing_session_only_touches_nothing(
    tmp_path: Path, home: Path, mode: str, target: str
) -> None:
    session = TARGETS[target](home)
    before = listing(tmp_path)
    with pytest.raises(ArtifactSessionNotFoundError) as caught:
        open_session(session, mode=mode)  # type: ignore[arg-type]
    assert str(caught.value).startswith(f"no spillvault session at {session}")
    assert isinstance(caught.value, ArtifactAccessError)
    assert listing(tmp_path) == before


def test_a_file_where_the_session_should_be_is_no_session(tmp_path: Path) -> None:
    path = tmp_path / "session-a"
    path.write_text("not a directory\n")
    with pytest.raises(ArtifactSessionNotFoundError):
        open_session(path, mode="open")


def test_an_invalid_marker_is_refused_and_nothing_is_created(home: Path) -> None:
    (home / MARKER_NAME).write_text("{}\n")
    (home / MARKER_NAME).chmod(0o600)
    before = listing(home)
    for mode in ("open", "read"):
        with pytest.raises(ArtifactLeaseJournalError, match=r"marker .* is invalid"):
            open_session(home, mode=mode)  # type: ignore[arg-type]
    assert cli_main(["ls", "--session", str(home)]) == 3
    assert listing(home) == before


def test_mode_must_be_known(session_dir: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        open_session(session_dir, mode="write")  # type: ignore[arg-type]
    assert not session_dir.exists()
