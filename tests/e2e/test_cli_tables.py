"""`spillvault ls`: one aligned table over every session, ages from an injected now."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.commands import ls_command
from spillvault.adapters.cli.main import build_parser
from spillvault.adapters.cli.main import main as cli_main
from spillvault.adapters.cli.tables import Column, age_text, human_size, render_table
from spillvault.adapters.session import open_session
from spillvault.adapters.storage.session_root import HOME_ENV
from spillvault.domain.command import CommandFacts

from support.dates import fixed
from support.fakes import FakeClock

if TYPE_CHECKING:
    from pathlib import Path

START = fixed(2030)


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0 B"),
        (312, "312 B"),
        (999, "999 B"),
        (1000, "1.0 KB"),
        (51200, "51.2 KB"),
        (999_949, "999.9 KB"),
        (999_960, "1.0 MB"),  # rounding carries into the next unit
        (1_234_567, "1.2 MB"),
        (5 * 10**9, "5.0 GB"),
        (10**18, "1000.0 PB"),
    ],
)
def test_sizes_read_as_people_write_them(count: int, shown: str) -> None:
    assert human_size(count) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-30, "0s"),  # a creation time ahead of the clock
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (86399, "23h"),
        (86400, "1d"),
        (10 * 86400 + 5, "10d"),
    ],
)
def test_ages_show_their_largest_whole_unit(seconds: float, shown: str) -> None:
    assert age_text(seconds) == shown


def test_a_table_aligns_its_columns_and_shows_missing_cells_as_dashes() -> None:
    columns = [
        Column("NAME", lambda row: str(row["name"])),
        Column("N", lambda row: "-" if row["n"] is None else str(row["n"]), True),
        Column("NOTE", lambda row: str(row["note"])),
    ]
    rows: list[dict[str, object]] = [
        {"name": "a", "n": 1234, "note": ""},
        {"name": "longer", "n": None, "note": "x"},
    ]
    assert render_table(columns, rows) == [
        "NAME       N  NOTE",
        "a       1234",  # no trailing spaces
        "longer     -  x",
    ]


def make_session(root: Path, name: str, start: timedelta, tool: str, text: str) -> None:
    with open_session(root / name, clock=FakeClock(START + start)) as session:
        session.externalizer.externalize(text, tool)


def make_run_session(root: Path, name: str, runs: list[CommandFacts]) -> None:
    """Store one output per command run, as `spillvault run` does."""
    with open_session(root / name, clock=FakeClock(START)) as session:
        for facts in runs:
            session.externalizer.store.store(
                [b"out\n"], source_tool="bash", command=facts
            )


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty session root of its own (conftest unsets $SPILLVAULT_SESSION)."""
    path = tmp_path / "root"
    monkeypatch.setenv(HOME_ENV, str(path))
    return path


def test_ls_is_one_table_over_every_session_with_ages_from_now(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_session(root, "alpha", timedelta(0), "bash", "x\n" * 600)
    make_session(root, "beta", timedelta(hours=2), "pytest", "hello\n")
    args = build_parser().parse_args(["ls"])
    assert ls_command(args, now=START + timedelta(hours=5, minutes=59)) == 0
    assert capsys.readouterr().out.splitlines() == [
        "HANDLE     SIZE  LINES  AGE  TOOL    STATE   EXIT  COMMAND",
        "alpha/1  1.2 KB    600   5h  bash    sealed  -     -",
        "beta/1      6 B      1   3h  pytest  sealed  -     -",
    ]
    assert cli_main(["ls", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["artifacts"]
    assert [row["handle"] for row in rows] == ["alpha/1", "beta/1"]
    alpha = rows[0]
    assert alpha == {
        "handle": "alpha/1",
        "filename": "tool_result_001.txt",
        "size_bytes": 1200,
        "line_count": 600,
        "created_at": START.isoformat(),
        "source_tool": "bash",
        "state": "sealed",
        "sha256_prefix": alpha["sha256_prefix"],
        "summary": alpha["summary"],
        "command": None,
        "exit_status": None,
        "signal": None,
        "timed_out": None,
        "duration_ms": None,
    }
    assert len(alpha["sha256_prefix"]) == 12
    assert alpha["summary"].startswith("x (600 lines, 1200 bytes)")


def test_ls_shows_each_runs_exit_and_command_line(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = ("bash", "-c", "for i in $(seq 1 100); do echo line $i; done\nexit 0")
    make_run_session(
        root,
        "runs",
        [
            CommandFacts(("pytest", "-x", "tests"), 1, 12_480),
            CommandFacts(long, 143, 2_000, signal="SIGTERM"),
            CommandFacts(("sleep", "30"), 124, 1_004, "SIGTERM", timed_out=True),
            CommandFacts(("true",), 0, 3),
        ],
    )
    args = build_parser().parse_args(["ls"])
    assert ls_command(args, now=START) == 0
    assert capsys.readouterr().out.splitlines() == [
        "HANDLE  SIZE  LINES  AGE  TOOL  STATE   EXIT         COMMAND",
        "runs/1   4 B      1   0s  bash  sealed  1            pytest -x tests",
        (
            "runs/2   4 B      1   0s  bash  sealed  143 SIGTERM  "
            "bash -c 'for i in $(seq 1 100); do ec..."  # 40 characters
        ),
        "runs/3   4 B      1   0s  bash  sealed  124 timeout  sleep 30",
        "runs/4   4 B      1   0s  bash  sealed  0            true",
    ]
    assert cli_main(["ls", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["artifacts"]
    fields = ("command", "exit_status", "signal", "timed_out", "duration_ms")
    assert [tuple(row[f] for f in fields) for row in rows] == [
        (["pytest", "-x", "tests"], 1, None, False, 12_480),
        (list(long), 143, "SIGTERM", False, 2_000),
        (["sleep", "30"], 124, "SIGTERM", True, 1_004),
        (["true"], 0, None, False, 3),
    ]


def test_ls_of_no_artifacts_says_so(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["ls"]) == 0
    assert capsys.readouterr().out == "no artifacts\n"
