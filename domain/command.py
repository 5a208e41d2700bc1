"""What a finished command did: its argv, exit status, signal and duration."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

COUNT_LIMIT: Final = 2**64  # exit statuses and durations are counts below it
SIGNAL_NAME_MAX: Final = 24
_SIGNAL_NAME: Final = re.compile(rf"SIG[A-Z0-9+]{{1,{SIGNAL_NAME_MAX - 3}}}")


@dataclass(frozen=True)
class CommandFacts:
    """A finished command: argv, the shell's exit status, what ended it, how long."""

    argv: tuple[str, ...]
    exit_status: int
    duration_ms: int
    # The signal that ended the command (`SIGTERM`, as `kill -l` names it).
    signal: str | None = None
    timed_out: bool = False

    def __post_init__(self) -> None:
        """Reject facts that no command run has, or that an event cannot carry."""
        argv = self.argv
        if not isinstance(argv, tuple) or not argv:
            msg = "argv must be a non-empty tuple of strings"
            raise ValueError(msg)
        for arg in argv:
            if not isinstance(arg, str):
                msg = f"argv holds a {type(arg).__name__}, not a string"
                raise TypeError(msg)
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                # A lone surrogate (an undecodable byte) cannot be stored as JSON.
                msg = f"argv must be valid Unicode: {arg!r}"
                raise ValueError(msg) from None
        for name in ("exit_status", "duration_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                msg = f"{name} must be an int, not {type(value).__name__}"
                raise TypeError(msg)
            if not 0 <= value < COUNT_LIMIT:
                msg = f"{name} must be in [0, 2**64), not {value}"
                raise ValueError(msg)
        if self.signal is not None and not _SIGNAL_NAME.fullmatch(self.signal):
            msg = f"not a signal name: {self.signal!r}"
            raise ValueError(msg)

    @property
    def command_line(self) -> str:
        """Return the argv as a shell would take it back (`shlex.join`)."""
        return shlex.join(self.argv)

    @property
    def ending(self) -> str | None:
        """Return what ended the command besides its own exit: a timeout, a signal."""
        return "timed out" if self.timed_out else self.signal

    def to_payload(self) -> dict[str, Any]:
        """Return the event field (primitives only)."""
        return {
            "argv": list(self.argv),
            "exit_status": self.exit_status,
            "duration_ms": self.duration_ms,
            "signal": self.signal,
            "timed_out": self.timed_out,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> CommandFacts:
        """Rebuild from `to_payload()` output."""
        return cls(
            argv=tuple(payload["argv"]),
            exit_status=payload["exit_status"],
            duration_ms=payload["duration_ms"],
            signal=payload["signal"],
            timed_out=payload["timed_out"],
        )


def duration_text(duration_ms: int) -> str:
    """Return a duration in seconds to a tenth, cut rather than rounded: `12.4s`."""
    return f"{duration_ms // 1000}.{duration_ms % 1000 // 100}s"
