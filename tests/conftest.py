from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from support.pg_fixture import postgres_dsn  # noqa: F401 - a session-wide fixture
from support.seaweedfs import s3_server  # noqa: F401 - a session-wide fixture

if TYPE_CHECKING:
    from pathlib import Path

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("default")


@pytest.fixture(autouse=True)
def session_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's session root is its own temporary directory, never ~/.local."""
    monkeypatch.setenv("SPILLVAULT_HOME", str(tmp_path))
    monkeypatch.delenv("SPILLVAULT_SESSION", raising=False)
    return tmp_path


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    """A session directory path that does not exist yet."""
    return tmp_path / "session-a"


def _uses_fixed_dates(module: ModuleType, seen: set[str]) -> bool:
    """Say whether `module` reaches `support.dates` through the test code it uses."""
    if module.__name__ == "support.dates":
        return True
    seen.add(module.__name__)
    for value in vars(module).values():
        used = value if isinstance(value, ModuleType) else None
        if used is None:
            used = sys.modules.get(getattr(value, "__module__", None) or "")
        if used is None or used.__name__ in seen:
            continue
        if used.__name__.startswith(("support.", "test_")) and _uses_fixed_dates(
            used, seen
        ):
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the crash tier `crash`, and `dated` every test using a fixed date.

    A module whose clocks all start at the real time says so in
    `CLOCKS_START_AT_REAL_TIME`, a single test with `@pytest.mark.real_time`:
    the date-shifted re-runs have no date of theirs to move.
    """
    verdicts: dict[str, bool] = {}
    for item in items:
        if item.path.parent.name == "crash":
            item.add_marker(pytest.mark.crash)
        module = getattr(item, "module", None)
        if module is None:
            continue
        if module.__name__ not in verdicts:
            # A module whose clocks start at the real time declares it: the
            # support code it shares may hold fixed dates it never uses.
            real_time = getattr(module, "CLOCKS_START_AT_REAL_TIME", False)
            verdicts[module.__name__] = not real_time and _uses_fixed_dates(
                module, set()
            )
        if verdicts[module.__name__] and not item.get_closest_marker("real_time"):
            item.add_marker(pytest.mark.dated)
