"""The suite passes on any date (issue 13): fixed dates come from one place.

A fake clock fixed at a date, set beside files whose mtimes the kernel
stamped, made five tests fail on every day after 2026-11-30. Now every fixed
date comes from `support.dates.fixed`, `CrashFS` stamps mtimes from the
world's clock, and `make test-dates` re-runs the `dated` tests as if the
machine's date were a year and ten years past the dates written in them.
"""

from __future__ import annotations

import ast
import importlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import _uses_fixed_dates

from spillvault.domain.values import ArtifactCleanupPolicy

from support import dates
from support.crash_world import CrashWorld
from support.fakes import FakeClock

TESTS = Path(__file__).parent.parent
# Datetimes that are inputs or expectations under test, not clocks.
ALLOWED = {"test_values.py", "test_dates.py"}


def test_fixed_moves_dates_back_by_the_years_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dates, "YEARS_AHEAD", 0)
    assert dates.fixed(2026, 11, 30, 12) == datetime(2026, 11, 30, 12, tzinfo=UTC)
    monkeypatch.setattr(dates, "YEARS_AHEAD", 10)
    assert dates.fixed(2026, 11, 30, 12) == datetime(2016, 11, 30, 12, tzinfo=UTC)
    monkeypatch.setattr(dates, "YEARS_AHEAD", 1)
    assert dates.fixed(2024, 2, 29) == datetime(2023, 2, 28, tzinfo=UTC)


@pytest.mark.parametrize("raw", ["x", "1.5", "-1", "101"])
def test_a_bad_shift_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("SPILLVAULT_TEST_YEARS_AHEAD", raw)
    with pytest.raises(ValueError, match="SPILLVAULT_TEST_YEARS_AHEAD"):
        dates._years_ahead()


def _literal_dates(path: Path) -> list[int]:
    """Lines of `path` that build a datetime from a literal year."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None))
        in {"datetime", "date"}
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, int)
        and node.args[0].value != 1970
    ]


def test_no_test_builds_a_fixed_date_of_its_own() -> None:
    offenders = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if "node_modules" not in path.parts  # the npm packages the tests run
        if path.name not in ALLOWED and path != Path(dates.__file__)
        if (lines := _literal_dates(path))
    }
    assert offenders == {}, "use support.dates.fixed() for fixed dates"


def test_the_tests_that_broke_on_the_date_are_marked_dated() -> None:
    for name in ("test_crash_enumeration", "test_planted_bugs", "test_reader"):
        assert _uses_fixed_dates(importlib.import_module(name), set()), name
    assert not _uses_fixed_dates(importlib.import_module("test_key_lines"), set())


def test_crash_fs_stamps_mtimes_from_the_world_clock(tmp_path: Path) -> None:
    start = dates.fixed(2026, 11, 30, 12)
    world = CrashWorld(tmp_path, seed=1, start=start)
    try:
        stored = world.store_artifact(40_000)
        assert stored is not None
        mtime = Path(stored.path).stat().st_mtime_ns
        assert (
            mtime
            == (start - datetime(1970, 1, 1, tzinfo=UTC))
            // timedelta(microseconds=1)
            * 1000
        )
        world.advance(2 * 3600)  # past the world's orphan TTL
        plan = world.gc_plan()
        assert plan is not None
        planned = {
            d.filename for d in plan.decisions if d.status.value == "planned_delete"
        }
        assert Path(stored.path).name in planned
    finally:
        world.close()


def test_a_fake_clock_default_is_a_fixed_date() -> None:
    assert FakeClock().now() == dates.fixed(2026)
    assert ArtifactCleanupPolicy().orphan_ttl_seconds > 0


def test_a_crash_world_without_a_start_runs_at_the_real_time(tmp_path: Path) -> None:
    # What lets the fuzzers say CLOCKS_START_AT_REAL_TIME and leave the
    # date-shifted re-runs: their worlds are built without a start.
    before = datetime.now(UTC)
    world = CrashWorld(tmp_path, seed=1)
    try:
        assert before <= world.clock.now() <= datetime.now(UTC)
    finally:
        world.close()
