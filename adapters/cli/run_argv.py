"""`spillvault run`'s arguments as hooks write them, read without argparse.

A hook wraps every shell command as `spillvault run --session S --fail-open --
SHELL -lc CMD`, so the launcher reads that form itself: argparse and building
the full parser cost more than the rest of a short run. Only options spelled
out in full, each value its own argument, then `--` and the command, are read
here; anything else (`-h`, an abbreviation, `--opt=value`, `--timeout`, no
`--`, a value starting with `-`) is left to the full command line, which reads
the same options the same way (a test compares the two).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Final, cast

from spillvault.adapters.cli.run import EXIT_OWN_FAILURE

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

_FLAGS: Final = {
    "--json": ("json", True),
    "--fail-open": ("fail_open", True),
    "--tee": ("tee", True),
    "--no-tee": ("tee", False),
}
_VALUES: Final = {"--session": "session", "--tool": "tool", "--policy": "policy"}
_DEFAULTS: Final = {
    "session": None,
    "json": False,
    "tool": "bash",
    "policy": None,
    "timeout": None,
    "tee": None,
    "fail_open": False,
    "failure_status": EXIT_OWN_FAILURE,
}


def parse_run(argv: Sequence[str]) -> argparse.Namespace | None:
    """Read the arguments after `run`; None when only the full parser may read them."""
    values: dict[str, object] = dict(_DEFAULTS)
    rest = list(argv)
    while rest and rest[0] != "--":
        option = rest.pop(0)
        if option in _FLAGS:
            name, value = _FLAGS[option]
            values[name] = value
        elif option in _VALUES and rest and not rest[0].startswith("-"):
            values[_VALUES[option]] = rest.pop(0)
        else:
            return None
    if not rest:
        return None
    # As argparse's REMAINDER keeps it: from the `--` on.
    values["command"] = rest
    # The attributes argparse would set, without loading argparse.
    return cast("argparse.Namespace", SimpleNamespace(**values))


__all__ = ["parse_run"]
