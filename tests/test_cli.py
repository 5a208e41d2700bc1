"""The `spillvault` command: help, version, and a demo that really runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import spillvault

SCRIPT = str(Path(sys.executable).parent / "spillvault")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=60,
    )


def test_help_lists_the_commands() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "demo" in done.stdout
    assert "Linux" in done.stdout


def test_version() -> None:
    assert run("--version").stdout.strip() == f"spillvault {spillvault.__version__}"


def test_no_command_prints_usage_and_fails() -> None:
    done = run()
    assert done.returncode == 2
    assert "usage: spillvault" in done.stdout


def test_demo_spills_leases_reconciles_collects_and_refuses(tmp_path: Path) -> None:
    done = run("demo", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for line in (
        "[externalize] grep: 1.1MB → ",
        "key line kept in the preview → line 11874: tests/test_gc.py:212: Assert",
        "11874: tests/test_gc.py:212: AssertionError",
        "[grep] 'AssertionError' → line 11874",
        "[lease] memory-ref-1 prepared → written by the SQLite owner → committed",
        "memory-ref-2: the owner wrote it, but its reply never came",
        "[reopen] prepared, protecting with no expiry: ('memory-ref-2',)",
        "[reconcile] memory-ref-2: committed (owner_published",
        "[lease] refused: illegal transition: Lease cannot commit from 'released'",
        "[journal] 5 chained records match the event store",
        "[gc plan] tool_result_001.txt: retained_referenced (protected by 1 live ref",
        "[gc plan] tool_result_002.txt: planned_delete (unreferenced, 2.0 d old",
        "[gc apply] tool_result_002.txt: deleted (verified and unlinked)",
        "[refused] event store missing",
    ):
        assert line in out, line
    assert "[BUG]" not in out
    assert list(tmp_path.iterdir()) == []  # the demo cleans up after itself
