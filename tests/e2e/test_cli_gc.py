"""`spillvault gc`: a dry run by default, counts, --apply, progress, errors (S6)."""

from __future__ import annotations

import errno
import io
import json
import os
import time
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.gc import ProgressLine, gc_command
from spillvault.adapters.cli.main import build_parser
from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.fs import OsFileSystem

from support.gc_world import committed, entries, stored

if TYPE_CHECKING:
    from pathlib import Path


def spilled_session(
    session_dir: Path, count: int, days_old: list[float] | None = None
) -> list[Path]:
    """A session with `count` unreferenced artifacts, three days old unless told."""
    with open_session(session_dir) as session:
        ext = session.externalizer
        refs = [
            ext.externalize(f"output {i}\n" * 9000, "bash").artifact
            for i in range(count)
        ]
        names = [ext.store.resolve(ref.handle) for ref in refs]
    paths = [session_dir / "tool-results" / name for name in names]
    for path, days in zip(paths, days_old or [3.0] * count, strict=True):
        # A minute more than whole days, so the age never rounds below them.
        mtime = time.time() - days * 86400 - 60
        os.utime(path, (mtime, mtime))
    return paths


def test_gc_is_a_dry_run_unless_applied(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = spilled_session(session_dir, 3)
    (session_dir / "tool-results" / "notes.txt").write_text("mine")
    assert cli_main(["gc", "--session", str(session_dir)]) == 0
    out = capsys.readouterr().out
    assert "      3  planned_delete" in out
    assert "      1  retained_unknown" in out
    assert "dry run: 3 would be deleted" in out
    assert all(path.exists() for path in paths)
    assert cli_main(["gc", "--session", str(session_dir), "--apply", "--max", "2"]) == 0
    out = capsys.readouterr().out
    assert "      2  deleted" in out
    assert "      1  retained_limit" in out
    assert [path.exists() for path in paths] == [False, False, True]  # oldest first


def test_gc_counts_by_status_and_names_files_oldest_first_only_when_verbose(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spilled_session(session_dir, 4, days_old=[2, 10, 3, 0])
    (session_dir / "tool-results" / "notes.txt").write_text("mine")
    at = ["gc", "--session", str(session_dir)]
    assert cli_main(at) == 0
    assert capsys.readouterr().out.splitlines() == [
        "plan:",
        "      3  planned_delete",
        "             3 x expired_unreferenced_artifact",
        "      1  retained_recent",
        "             1 x unreferenced_artifact_within_orphan_ttl",
        "      1  retained_unknown",
        "             1 x cleanup_plan_filename_not_owned",
        "dry run: 3 would be deleted; run again with --apply",
    ]
    args = build_parser().parse_args(at)
    args.verbose = True  # what -v/--verbose sets
    assert gc_command(args) == 0
    out = capsys.readouterr().out.splitlines()
    files = [line.split()[:2] for line in out if "tool_result_" in line]
    # By age in seconds, oldest first: as text, "10d" would sort before "2d".
    assert files == [
        ["10d", "tool_result_002.txt"],
        ["3d", "tool_result_003.txt"],
        ["2d", "tool_result_001.txt"],
        ["1m", "tool_result_004.txt"],
    ]
    first = out.index("             3 x expired_unreferenced_artifact")
    assert out[first + 1] == (
        "                   10d  tool_result_002.txt  "
        "unreferenced, 10.0 d old, past the TTL of 1.0 d"
    )
    assert out[-3] == "             1 x cleanup_plan_filename_not_owned"
    assert out[-2].split()[:2] == ["-", "notes.txt"]  # not scanned: no age known


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--ttl", "9" * 400),  # inf seconds: timedelta raised OverflowError
        ("--ttl", "100000000000000d"),
        ("--ttl", "nan"),
        ("--ttl", "-1h"),
        ("--max", "-1"),
        ("--max", "9" * 5000),
    ],
)
def test_a_flag_beyond_its_range_names_the_flag_and_deletes_nothing(
    session_dir: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    paths = spilled_session(session_dir, 2)
    with pytest.raises(SystemExit) as exited:
        cli_main(["gc", "--session", str(session_dir), "--apply", flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}: " in capsys.readouterr().err
    assert all(path.exists() for path in paths)


def test_gc_json_holds_the_plan_and_the_report(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spilled_session(session_dir, 1)
    assert cli_main(["gc", "--session", str(session_dir), "--ttl", "4d", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["plan"]["counts"] == {"retained_recent": 1}
    assert data["report"]["dry_run"] is True
    assert str(session_dir) not in json.dumps(data)  # filenames, never paths


def test_gc_exits_non_zero_when_an_io_error_stops_the_run(
    session_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = spilled_session(session_dir, 2)

    def failing_rename(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    monkeypatch.setattr(OsFileSystem, "rename", failing_rename)
    assert cli_main(["gc", "--session", str(session_dir), "--apply"]) == 4
    err = capsys.readouterr().err
    assert "gc stopped on an I/O error" in err
    assert "2 candidates left untouched" in err
    assert all(path.exists() for path in paths)


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, plain = Terminal(), io.StringIO()
    for stream in (terminal, plain):
        progress = ProgressLine("planning", stream)
        for done in range(1, 1001):
            progress(done, 1000)
    assert terminal.getvalue().endswith("\rplanning [" + "#" * 30 + "] 1000/1000\n")
    # a line when it starts, then one per tenth
    steps = [1, *range(100, 1001, 100)]
    assert plain.getvalue().splitlines() == [f"planning: {n}/1000" for n in steps]
    quiet = io.StringIO()
    ProgressLine("planning", quiet)(5, 10)  # small work shows nothing
    assert quiet.getvalue() == ""


# ------------------------------------------------------------- --all-sessions


def spilled_sessions(root: Path, *days_old: list[float]) -> list[list[Path]]:
    """Sessions s1, s2... under the root, oldest first, with orphans that old."""
    spilled = []
    for number, days in enumerate(days_old, 1):
        session_dir = root / f"s{number}"
        spilled.append(spilled_session(session_dir, len(days), days))
        # The root lists sessions by their marker's mtime: fix the order.
        made = 1_700_000_000 + number
        os.utime(session_dir / "session.json", (made, made))
    return spilled


def gc_all(*flags: str) -> list[str]:
    return ["gc", "--all-sessions", *flags]


def test_gc_all_sessions_is_a_dry_run_over_every_session(
    session_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spilled = spilled_sessions(session_root, [3, 3], [3, 0])
    assert cli_main(gc_all()) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("==")] == [
        "== session s1 ==",
        "== session s2 ==",
    ]
    s2 = out[out.index("== session s2 ==") :]
    assert "      1  planned_delete" in s2
    assert "      1  retained_recent" in s2
    assert out[-1] == "total: 2 sessions, 3 would be deleted, 0 failed"
    assert all(path.exists() for paths in spilled for path in paths)


def test_gc_all_sessions_applied_deletes_orphans_past_the_ttl_in_every_session(
    session_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (s1_old, s1_new), (s2_old,) = spilled_sessions(session_root, [3, 0], [5])
    assert cli_main(gc_all("--apply")) == 0
    out = capsys.readouterr().out.splitlines()
    assert out.count("      1  deleted") == 2
    assert out[-1] == "total: 2 sessions, 2 deleted, 0 failed"
    assert [s1_old.exists(), s1_new.exists(), s2_old.exists()] == [False, True, False]


def test_gc_all_sessions_json_has_each_session_and_the_totals(
    session_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spilled_sessions(session_root, [3, 3], [3])
    assert cli_main(gc_all("--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["session"], s["path"]) for s in data["sessions"]] == [
        ("s1", str(session_root / "s1")),
        ("s2", str(session_root / "s2")),
    ]
    assert [s["plan"]["counts"] for s in data["sessions"]] == [
        {"planned_delete": 2},
        {"planned_delete": 1},
    ]
    assert all(s["report"]["dry_run"] for s in data["sessions"])
    assert data["totals"] == {
        "sessions": 2,
        "planned_delete": 3,
        "deleted": 0,
        "failed": 0,
        "dry_run": True,
    }


def test_gc_all_sessions_keeps_an_artifact_a_committed_lease_protects(
    session_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leased_dir = session_root / "s1"
    with open_session(leased_dir) as session:
        leased, orphan = stored(session, "leased"), stored(session, "orphan")
        committed(session, leased)
    for ref in (leased, orphan):
        old = time.time() - 3 * 86400
        os.utime(ref.path, (old, old))
    os.utime(leased_dir / "session.json", (1_700_000_000, 1_700_000_000))
    (elsewhere,) = spilled_session(session_root / "s2", 1)
    assert cli_main(gc_all("--apply", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sessions"][0]["report"]["counts"] == {
        "deleted": 1,
        "retained_referenced": 1,
    }
    assert data["totals"]["deleted"] == 2
    assert [leased.path.exists(), orphan.path.exists(), elsewhere.exists()] == [
        True,
        False,
        False,
    ]


@pytest.mark.parametrize("damaged", ["events.sqlite3", "session.json"])
def test_gc_all_sessions_skips_a_broken_session_untouched_and_collects_the_rest(
    session_root: Path, capsys: pytest.CaptureFixture[str], damaged: str
) -> None:
    (first,), (broken,), (last,) = spilled_sessions(session_root, [3], [3], [3])
    (session_root / "s2" / damaged).write_bytes(b"not what it should be\n")
    before = entries(session_root / "s2")
    assert cli_main(gc_all("--apply")) == 4
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    skipped = out[out.index("== session s2 ==") + 1]
    assert skipped.startswith("skipped: ArtifactLeaseJournalError: ")
    assert out[-1] == "total: 3 sessions, 2 deleted, 1 failed"
    assert captured.err == "spillvault: gc failed on 1 of 3 sessions: s2\n"
    assert [first.exists(), broken.exists(), last.exists()] == [False, True, False]
    assert entries(session_root / "s2") == before
    assert cli_main(gc_all("--json")) == 4
    data = json.loads(capsys.readouterr().out)
    # A damaged marker is written last, so s2 no longer sorts second.
    s2 = next(s for s in data["sessions"] if s["session"] == "s2")
    assert s2["error"]["code"] == "artifact_lease_journal_error"
    assert "plan" not in s2
    assert data["totals"]["failed"] == 1


def test_gc_all_sessions_goes_on_after_an_io_error_stops_one_session(
    session_root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spilled = spilled_sessions(session_root, [3], [3])

    def failing_rename(*_args: object, **_kwargs: object) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    monkeypatch.setattr(OsFileSystem, "rename", failing_rename)
    assert cli_main(gc_all("--apply")) == 4
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": gc stopped")[0] for line in err[:2]] == [
        "spillvault: session s1",
        "spillvault: session s2",
    ]
    assert err[2] == "spillvault: gc failed on 2 of 2 sessions: s1, s2"
    assert all(path.exists() for paths in spilled for path in paths)


def test_gc_all_sessions_max_counts_deletions_across_sessions_oldest_session_first(
    session_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spilled = spilled_sessions(session_root, [3, 4], [5, 6], [7])
    assert cli_main(gc_all("--max", "3", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["plan"]["counts"] for s in data["sessions"]] == [
        {"planned_delete": 2},
        {"planned_delete": 1, "retained_limit": 1},
        {"retained_limit": 1},
    ]
    assert cli_main(gc_all("--max", "3", "--apply")) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "total: 3 sessions, 3 deleted, 0 failed"
    )
    # s2 loses its older file: within a session, the oldest go first.
    assert [[path.exists() for path in paths] for paths in spilled] == [
        [False, False],
        [True, False],
        [True],
    ]


def test_gc_all_sessions_with_session_is_a_usage_error(
    session_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = spilled_session(session_dir, 1)
    with pytest.raises(SystemExit) as exited:
        cli_main(gc_all("--session", str(session_dir), "--apply"))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--all-sessions and --session are mutually exclusive" in err
    assert all(path.exists() for path in paths)


@pytest.mark.parametrize("root_exists", [True, False])
def test_gc_all_sessions_over_no_sessions_says_so(
    session_root: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    root_exists: bool,
) -> None:
    root = session_root / "root"
    if root_exists:
        (root / "notes").mkdir(parents=True)  # no marker: not a session
        (root / "notes" / "keep.txt").write_text("mine")
    monkeypatch.setenv("SPILLVAULT_HOME", str(root))
    assert cli_main(gc_all("--apply")) == 0
    assert capsys.readouterr().out == f"no sessions under {root}\n"
    assert cli_main(gc_all("--json")) == 0
    assert json.loads(capsys.readouterr().out) == {
        "sessions": [],
        "totals": {
            "sessions": 0,
            "planned_delete": 0,
            "deleted": 0,
            "failed": 0,
            "dry_run": True,
        },
    }
    if root_exists:
        assert (root / "notes" / "keep.txt").read_text() == "mine"
