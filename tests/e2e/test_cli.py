"""The `spillvault` command: help, version, and a demo that really runs."""

from __future__ import annotations

import json
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
        "[externalize] grep via bash: 1.1MB → 30KB in context (spilled; handle tool_",
        "[key line] kept in the preview → line 11874: tests/test_gc.py:212: Assert",
        "[model] calls read_artifact({'start_line': 11873, 'limit': 3}), verified:",
        "[tool] 11874: tests/test_gc.py:212: AssertionError: artifact deleted",
        "[model] calls grep_artifact({'pattern': 'AssertionError'}), verified:",
        "[tool] [1 match]",
        "[lease] memory-ref-1 prepared → written by the SQLite owner → committed",
        "memory-ref-2: the owner wrote it, but its reply never came",
        "[reopen] PREPARED ['memory-ref-2'] protects tool_result_001.txt with no",
        "[reconcile] memory-ref-2: committed (owner_confirmed_reference",
        "[lease] memory-ref-1 deleted by the owner first, then released",
        "[journal] 5 chained records match the store",
        "cleared 1 oldest result(s) (toolu_demo_01)",
        "[gc] tool_result_099.txt: a 3-day-old file with no event",
        "[gc plan] 1 planned_delete, 3 retained_recent, 1 retained_referenced",
        "tool_result_001.txt: retained_referenced (active_memory_retention_claim: ",
        "tool_result_099.txt: planned_delete (expired_unreferenced_artifact: unref",
        "[gc apply] 1 deleted",
        "chars with spillvault vs 1,609,2",
        "4 artifact(s) on disk, 1 live lease(s)",
        "[refused] event store missing",
    ):
        assert line in out, line
    assert "[BUG]" not in out
    assert list(tmp_path.iterdir()) == []  # the demo cleans up after itself


def test_demo_json_emits_one_object_per_event_and_keep_leaves_the_session(
    tmp_path: Path,
) -> None:
    done = run("demo", "--dir", str(tmp_path), "--json", "--keep")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    tags = [event["event"] for event in events]
    for tag in (
        "externalize",
        "model",
        "lease",
        "reconcile",
        "microcompact",
        "gc apply",
    ):
        assert tag in tags, tag
    summary = next(e for e in events if e["event"] == "summary")
    assert summary["context_chars"] < summary["raw_chars"] / 10
    kept = events[-1]
    assert kept["event"] == "keep"
    assert (Path(kept["path"]) / "tool-results").is_dir()
