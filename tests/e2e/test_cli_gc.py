"""`spillvault gc`: a dry run by default, counts, --apply, progress, errors (S6)."""

from __future__ import annotations

import errno
import io
import json
import os
import time
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.gc import ProgressLine
from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.fs import OsFileSystem

if TYPE_CHECKING:
    from pathlib import Path

OLD = time.time() - 3 * 86400


def spilled_session(session_dir: Path, count: int) -> list[Path]:
    """A session with `count` unreferenced artifacts, three days old."""
    with open_session(session_dir) as session:
        refs = [
            session.externalizer.externalize(f"output {i}\n" * 9000, "bash").artifact
            for i in range(count)
        ]
    paths = [session_dir / "tool-results" / os.path.basename(r.path) for r in refs]
    for path in paths:
        os.utime(path, (OLD, OLD))
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
