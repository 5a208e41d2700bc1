from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from support.pg_fixture import postgres_dsn  # noqa: F401 - a session-wide fixture

if TYPE_CHECKING:
    from pathlib import Path

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("default")


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    """A session directory path that does not exist yet."""
    return tmp_path / "session-a"
