"""A read-only session (a backup, a snapshot, a read-only mount) stays readable.

`read`, `grep`, `ls` and `journal verify` work; everything that would write
(`run`, `gc`, `journal repair`, `reconcile`, `lease resolve`, and the recovery
pass of an open) is refused with `ArtifactSessionReadOnlyError`, which names
the session and says it is read-only, never with a raw OSError.

Two ways in: a filesystem seam that answers EROFS to every write (runs
everywhere), and a real read-only bind mount in a private mount namespace
(`unshare`, skipped where namespaces are unavailable).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from spillvault.adapters import session as session_module
from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.owners.sqlite_owner import SQLiteOwner
from spillvault.adapters.session import open_session
from spillvault.domain.constants import RETENTION_JOURNAL_NAME
from spillvault.domain.enums import ArtifactLeasePhase
from spillvault.domain.errors import (
    ArtifactLeaseJournalError,
    ArtifactSessionReadOnlyError,
)
from spillvault.domain.values import ArtifactCleanupPolicy, ArtifactRetentionClaim

from support.intercept import InterceptingFS
from support.leases import transaction

if TYPE_CHECKING:
    from spillvault.adapters.session import Session

    from support.intercept import Call

SCRIPT = str(Path(sys.executable).parent / "spillvault")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
SQLITE_SIDE_FILES = {"events.sqlite3-shm", "events.sqlite3-wal"}
"""SQLite's own files: it bypasses the seam (the real mount test covers it)."""


def _erofs(name: object) -> OSError:
    return OSError(errno.EROFS, os.strerror(errno.EROFS), str(name))


def _open_for_reading_only(call: Call) -> None:
    """A writing `open` fails with EROFS."""
    path, flags, dir_fd = call["path"], call["flags"], call["dir_fd"]
    if flags & _WRITE_FLAGS:
        if flags & os.O_CREAT and flags & os.O_EXCL:
            # The kernel reports an existing name first.
            os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        raise _erofs(path)


def _mkdir_nothing(call: Call) -> NoReturn:
    """`mkdir` fails: EEXIST for an existing name, else EROFS."""
    path = call["path"]
    try:
        os.stat(path, dir_fd=call["dir_fd"], follow_symlinks=False)
    except FileNotFoundError:
        raise _erofs(path) from None
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path))


def _refuse(call: Call) -> NoReturn:
    raise _erofs(call.args[0] if call.args else "")


def read_only_fs() -> InterceptingFS:
    """The real seam on a filesystem mounted read-only, as the kernel answers."""
    fs = InterceptingFS()
    fs.before("open", _open_for_reading_only)
    fs.before("mkdir", _mkdir_nothing)
    refused_ops = ("link", "rename", "unlink", "rmdir", "write", "ftruncate", "fchmod")
    fs.before(refused_ops, _refuse)
    return fs


def listing(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under `root` with its mode and (for files) its bytes."""
    return {
        str(path.relative_to(root)): (
            path.lstat().st_mode,
            path.read_bytes() if path.is_file() else b"",
        )
        for path in sorted(root.rglob("*"))
        if path.name not in SQLITE_SIDE_FILES
    }


def build_session(session_dir: Path) -> dict[str, Any]:
    """A closed session with two artifacts, a committed and a prepared lease."""
    with open_session(session_dir) as session:
        first = session.externalizer.externalize("alpha line\n" * 9000, "bash")
        second = session.externalizer.externalize(
            "beta line\n" * 8000 + "FATAL: found\n", "bash"
        )
        claim = ArtifactRetentionClaim(
            first.artifact.source.source_id, first.artifact.content_sha256
        )
        session.journal.publish_reference(claim, lambda: None, transaction_id="tx-1")
        session.journal.prepare(claim, transaction_id="tx-pending")
        plan = session.externalizer.plan_cleanup_from_journal(
            session.journal, policy=ArtifactCleanupPolicy(orphan_ttl_seconds=0)
        )
        facts = {
            "first": first.artifact.handle,
            "second": second.artifact.handle,
            "claim": claim,
            "plan": plan,
        }
    del session
    # A closed session's lock lives until collected; a read-only open must
    # not find this writer's lock (bound to the real seam) in the registry.
    gc.collect()
    return facts


class UntouchableOwner:
    """An owner that fails the test if a refused operation reaches it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a read-only session asked its owner for {name}")


def refused(error: BaseException, session_dir: Path) -> None:
    assert isinstance(error, ArtifactSessionReadOnlyError), repr(error)
    assert isinstance(error, ArtifactLeaseJournalError)
    assert str(session_dir) in str(error)
    assert "read-only" in str(error)


# ------------------------------------------------------------ the seam (everywhere)


@pytest.mark.parametrize("mode", ["create", "open"])
def test_a_writable_open_of_a_read_only_session_is_refused_by_name(
    session_dir: Path, mode: str
) -> None:
    build_session(session_dir)
    before = listing(session_dir)
    with pytest.raises(ArtifactSessionReadOnlyError) as caught:
        open_session(session_dir, fs=read_only_fs(), mode=mode)  # type: ignore[arg-type]
    refused(caught.value, session_dir)
    assert "mode='read'" in str(caught.value)
    assert isinstance(caught.value.__cause__, OSError)
    assert caught.value.__cause__.errno == errno.EROFS
    assert listing(session_dir) == before


def test_a_read_only_view_reads_and_refuses_every_write(
    session_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    facts = build_session(session_dir)
    before = listing(session_dir)
    journal_bytes = (session_dir / RETENTION_JOURNAL_NAME).read_bytes()
    with open_session(session_dir, fs=read_only_fs(), mode="read") as session:
        assert session.read_only
        assert session.recovery is None  # the recovery pass writes: skipped
        ext = session.externalizer
        assert ext.read_artifact(facts["first"], 0, 2) == "alpha line\nalpha line"
        assert ext.read_artifact_bytes(facts["second"], 0, 4) == b"beta"
        grep = ext.grep_artifact(facts["second"], "FATAL")
        assert [m.line_number for m in grep.matches] == [8001]
        assert [a.filename for a in ext.artifacts()] == [
            "tool_result_001.txt",
            "tool_result_002.txt",
        ]
        assert session.journal.verify().records == 3
        recovery = session.journal.recover()
        assert recovery.pending_transaction_ids == ("tx-pending",)
        assert [c.source_id for c in recovery.claims] == [facts["claim"].source_id]
        assert_writes_refused(session, session_dir, facts)
        caplog.clear()
    # Closing saves no lease view (a cache a read-only view does not write).
    assert "not saved" not in caplog.text
    assert listing(session_dir) == before
    assert (session_dir / RETENTION_JOURNAL_NAME).read_bytes() == journal_bytes


def assert_writes_refused(
    session: Session, session_dir: Path, facts: dict[str, Any]
) -> None:
    ext = session.externalizer
    journal = session.journal
    owner: Any = UntouchableOwner()
    claim = facts["claim"]
    published: list[str] = []
    policy = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)
    attempts = {
        "externalize": lambda: ext.externalize("x\n" * 90000, "bash"),
        "open_stream": lambda: ext.open_stream("bash"),
        "prepare": lambda: journal.prepare(claim, transaction_id="tx-new"),
        "commit": lambda: journal.commit("tx-pending"),
        "abort": lambda: journal.abort("tx-pending"),
        "release": lambda: journal.release("tx-1"),
        "publish_reference": lambda: journal.publish_reference(
            claim, lambda: published.append("published"), transaction_id="tx-p"
        ),
        "remove_reference": lambda: journal.remove_reference(
            "tx-1", lambda: published.append("removed")
        ),
        "reconcile_reference": lambda: journal.reconcile_reference("tx-pending", owner),
        "reconcile_pending": lambda: journal.reconcile_pending(owner),
        "reconcile_releases": lambda: journal.reconcile_releases(owner),
        "resolve": lambda: journal.resolve(
            "tx-pending", owner, decision=ArtifactLeasePhase.ABORTED, reason="test"
        ),
        "repair": journal.repair,
        "plan_cleanup_from_journal": lambda: ext.plan_cleanup_from_journal(
            journal, policy=policy
        ),
        "cleanup_artifacts_from_journal": lambda: ext.cleanup_artifacts_from_journal(
            journal, policy=policy
        ),
        "apply_cleanup_from_journal": lambda: ext.apply_cleanup_from_journal(
            facts["plan"], journal
        ),
        "plan_cleanup": lambda: ext.plan_cleanup([], policy=policy),
        "apply_cleanup": lambda: ext.apply_cleanup(facts["plan"], claims=[]),
    }
    for what, attempt in attempts.items():
        try:
            attempt()
        except ArtifactSessionReadOnlyError as error:
            refused(error, session_dir)
        else:
            pytest.fail(f"{what} was not refused")
    assert published == []
    # The gate never raises: a refused store keeps the result in context.
    assert ext.process("y\n" * 90000, "bash").reason == "store_failed"
    assert session.store.find_lease("tx-new") is None
    assert session.store.find_lease("tx-pending").phase is ArtifactLeasePhase.PREPARED


def test_a_read_only_view_of_a_journal_that_lags_the_store_reads_and_says_so(
    session_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot taken between a store commit and its journal append."""
    facts = build_session(session_dir)
    with open_session(session_dir) as writer:
        # Recorded in the store only, as by a writer that died before its append.
        writer.store.prepare_lease(transaction("session-a", "tx-lag"))
    del writer
    gc.collect()
    before = listing(session_dir)
    with open_session(session_dir, fs=read_only_fs(), mode="read") as session:
        for _ in range(2):  # a second sync starts again from the saved view
            assert len(list(session.externalizer.artifacts())) == 2
            recovery = session.journal.recover()
            assert recovery.pending_transaction_ids == ("tx-lag", "tx-pending")
        with pytest.raises(ArtifactLeaseJournalError, match="the store has more"):
            session.journal.verify()
        assert session.externalizer.read_artifact(facts["first"], 0, 1) == "alpha line"
    assert "not saved" not in caplog.text  # a folded view is not saved either
    assert listing(session_dir) == before


def test_the_cli_reads_a_read_only_session_and_refuses_writes(
    tmp_path: Path,
    session_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    facts = build_session(session_dir)
    owner = tmp_path / "owner.sqlite3"
    SQLiteOwner(owner)
    before = listing(session_dir)
    monkeypatch.setattr(session_module, "OS_FILESYSTEM", read_only_fs())
    for argv, expected in reading_commands(session_dir, facts):
        code = cli_main(argv)
        out, err = capsys.readouterr()
        assert code == 0, (argv, err)
        assert expected in out, (argv, out)
    for argv in writing_commands(session_dir, owner):
        assert cli_main(argv) == refused_status(argv), argv
        err = capsys.readouterr().err
        assert err.startswith("spillvault: ArtifactSessionReadOnlyError: "), err
        assert f"session {session_dir} is read-only" in err, err
    assert listing(session_dir) == before


def reading_commands(
    session_dir: Path, facts: dict[str, Any]
) -> list[tuple[list[str], str]]:
    at = ["--session", str(session_dir)]
    return [
        (["read", facts["first"], "--limit", "1"], "alpha line"),
        (["read", *at, facts["second"], "--bytes", "0:4"], "beta"),
        (["grep", facts["second"], "FATAL"], "8001:FATAL: found"),
        (["ls", *at], f"{session_dir.name}/2"),
        (["journal", "verify", *at], "journal ok: 3 records"),
    ]


def refused_status(argv: list[str]) -> int:
    """The CLI's refusal status: 3, but 125 for `run`, whose own failures are 125."""
    return 125 if argv[0] == "run" else 3


def writing_commands(session_dir: Path, owner: Path) -> list[list[str]]:
    at = ["--session", str(session_dir)]
    return [
        ["run", *at, "--", "seq", "30000"],  # run writes only an output it stores
        ["gc", *at],
        ["gc", *at, "--apply"],
        ["journal", "repair", *at],
        ["reconcile", *at, "--owner", f"sqlite:{owner}"],
        [
            *("lease", "resolve", *at, "tx-pending", "--owner", f"sqlite:{owner}"),
            *("--abort", "--reason", "test"),
        ],
    ]


# ------------------------------------------------- a real read-only bind mount

_MOUNT_RO = (
    'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
)


def read_only_runner(directory: Path) -> list[str]:
    """Return an argv prefix that runs a command with `directory` mounted read-only."""
    for unshare in (["unshare", "-rm"], ["unshare", "-m"]):
        prefix = [*unshare, "sh", "-c", _MOUNT_RO, "sh", str(directory)]
        try:
            probe = subprocess.run(
                [*prefix, "sh", "-c", f'touch "{directory}/probe"'],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
        except FileNotFoundError:
            break
        if (
            "Read-only file system" in probe.stderr
            and not (directory / "probe").exists()
        ):
            return prefix
    pytest.skip("no private mount namespace here (unshare -rm and -m both failed)")


def run_read_only(prefix: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *argv], capture_output=True, text=True, check=False, timeout=120
    )


def test_a_real_read_only_mount_reads_and_refuses_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mounted = tmp_path / "ro"
    mounted.mkdir()
    monkeypatch.setenv("SPILLVAULT_HOME", str(mounted))
    session_dir = mounted / "session-a"
    facts = build_session(session_dir)
    owner = tmp_path / "owner.sqlite3"
    SQLiteOwner(owner)
    prefix = read_only_runner(mounted)
    before = listing(mounted)
    for argv, expected in reading_commands(session_dir, facts):
        done = run_read_only(prefix, SCRIPT, *argv)
        assert done.returncode == 0, (argv, done.stderr)
        assert expected in done.stdout, (argv, done.stdout)
    for argv in writing_commands(session_dir, owner):
        done = run_read_only(prefix, SCRIPT, *argv)
        assert done.returncode == refused_status(argv), (argv, done.stderr)
        assert "Traceback" not in done.stderr
        assert f"session {session_dir} is read-only" in done.stderr, done.stderr
        assert os.strerror(errno.EROFS) in done.stderr, done.stderr
    assert listing(mounted) == before
    assert not {p.name for p in session_dir.iterdir()} & SQLITE_SIDE_FILES


def test_a_real_read_only_snapshot_of_a_crashed_writer_reads_its_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events only in `-wal` (the writer died before a checkpoint) are read too."""
    mounted = tmp_path / "ro"
    mounted.mkdir()
    monkeypatch.setenv("SPILLVAULT_HOME", str(mounted))
    session_dir = mounted / "session-a"
    build_session(session_dir)
    child = textwrap.dedent(
        f"""
        import os, sys
        from spillvault.adapters.session import open_session
        session = open_session({str(session_dir)!r})
        ref = session.externalizer.externalize("gamma line\\n" * 9000, "bash")
        print(ref.artifact.handle)
        sys.stdout.flush()
        os._exit(0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, check=True
    )
    handle = done.stdout.strip()
    assert (session_dir / "events.sqlite3-wal").stat().st_size > 0
    prefix = read_only_runner(mounted)
    before = listing(mounted)
    read = run_read_only(prefix, SCRIPT, "read", handle, "--limit", "1")
    assert read.returncode == 0, read.stderr
    assert read.stdout == "gamma line\n[more: --line 2 --limit 1]\n"
    listed = run_read_only(
        prefix, SCRIPT, "ls", "--session", str(session_dir), "--json"
    )
    assert listed.returncode == 0, listed.stderr
    names = [a["filename"] for a in json.loads(listed.stdout)["artifacts"]]
    assert names == [f"tool_result_00{i}.txt" for i in (1, 2, 3)]
    assert listing(mounted) == before


def test_the_library_on_a_real_read_only_mount(tmp_path: Path) -> None:
    mounted = tmp_path / "ro"
    mounted.mkdir()
    session_dir = mounted / "session-a"
    facts = build_session(session_dir)
    prefix = read_only_runner(mounted)
    script = textwrap.dedent(
        f"""
        from spillvault import ArtifactSessionReadOnlyError, open_session
        path = {str(session_dir)!r}
        try:
            open_session(path)
        except ArtifactSessionReadOnlyError as error:
            print("refused:", error)
        with open_session(path, mode="read") as session:
            print(session.externalizer.read_artifact({facts["first"]!r}, 0, 1))
            print(session.journal.verify().records)
            try:
                session.externalizer.externalize("z\\n" * 90000, "bash")
            except ArtifactSessionReadOnlyError as error:
                print("refused:", error)
        """
    )
    done = run_read_only(prefix, sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"refused: session {session_dir} is read-only")
    assert lines[1:3] == ["alpha line", "3"]
    assert lines[3].startswith(f"refused: session {session_dir} is opened read-only")
