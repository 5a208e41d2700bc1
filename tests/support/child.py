"""Run code that might never return in a child Python, killed at a generous limit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from .tiers import HANG_GUARD_SECONDS


def json_from_child(code: str, data: Any) -> Any:
    """Run `code` with `data` (JSON on stdin) in a child; return what it prints."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        check=False,
        timeout=HANG_GUARD_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
