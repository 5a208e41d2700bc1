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
