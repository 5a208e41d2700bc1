"""`spillvault run`: a command in its own process group, wrapped like `timeout`.

The command runs in a new process group. SIGINT, SIGTERM and SIGHUP sent to
spillvault go to that whole group; whatever of the group outlives a grace
period is killed, so nothing is left behind. `--timeout` does the same with
SIGTERM when the time is up. The exit status is the shell's: the command's
own, 128+N for a command killed by signal N, 127 for a command not found,
126 for one that cannot be executed, 124 after a timeout, and 125 when
spillvault itself fails. The command's stdin is spillvault's, unless that is a
terminal: a background process group cannot read one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import IO, TYPE_CHECKING, Final, Self

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import FrameType

    from spillvault.domain.command import CommandFacts

EXIT_TIMED_OUT: Final = 124
EXIT_OWN_FAILURE: Final = 125
EXIT_NOT_EXECUTABLE: Final = 126
EXIT_NOT_FOUND: Final = 127
FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long the group has to exit after a forwarded signal before SIGKILL: a
# background job of a non-interactive shell ignores SIGINT (POSIX).
GRACE_SECONDS: Final = 5.0
_READ_SIZE: Final = 1 << 16


class CommandNotStartedError(OSError):
    """The command could not be started; `status` is the shell's exit status."""

    def __init__(self, command: str, status: int, why: str) -> None:
        super().__init__(f"{command}: {why}")
        self.status = status


class CommandRun:
    """One command in its own process group, its output read as it comes."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        timeout: float | None = None,
        tee: IO[bytes] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = list(command)
        self.timeout = timeout
        self.tee = tee
        self.signalled: int | None = None
        self.timed_out = False
        self._clock = clock
        self._started = 0.0
        self._ended: float | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._killer: threading.Timer | None = None
        self._previous: dict[int, object] = {}

    @property
    def interrupted(self) -> bool:
        """Tell whether the command was stopped by a signal or the timeout."""
        return self.signalled is not None or self.timed_out

    def __enter__(self) -> Self:
        for signum in FORWARDED:
            self._previous[signum] = signal.signal(signum, self._forward)
        try:
            self._start()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._process is not None and self._process.poll() is None:
                self._stop(signal.SIGKILL)
                self._process.wait()
        finally:
            if self._killer is not None:
                self._killer.cancel()
            self._restore()

    def chunks(self) -> Iterator[bytes]:
        """Yield the merged stdout and stderr as it arrives, copying it to `tee`."""
        process = self._running()
        assert process.stdout is not None  # noqa: S101 - PIPE given
        # os.read returns what has arrived, so the tee is live.
        while data := os.read(process.stdout.fileno(), _READ_SIZE):
            if self.tee is not None:
                with contextlib.suppress(OSError):
                    self.tee.write(data)
                    self.tee.flush()
            yield data

    def wait(self) -> int:
        """Wait for the command, clear its group, and return the shell's status."""
        process = self._running()
        code = process.wait()
        self._ended = self._clock()
        if self.interrupted:
            # What of the group outlived the command dies with it.
            self._stop(signal.SIGKILL)
        return self._status(code)

    @property
    def exit_status(self) -> int:
        """Return the shell's status for the command, once `wait()` returned."""
        code, _ended = self._waited()
        return self._status(code)

    def facts(self) -> CommandFacts:
        """Return what the command did, once `wait()` returned."""
        # Loaded only for a stored output: a short one needs the status alone.
        from spillvault.domain.command import CommandFacts  # noqa: PLC0415

        code, ended = self._waited()
        # What ended it: the signal that killed it, else the one passed on to it.
        ended_by = -code if code < 0 else self.signalled
        return CommandFacts(
            argv=tuple(_shown_argument(arg) for arg in self.command),
            exit_status=self._status(code),
            duration_ms=max(0, round((ended - self._started) * 1000)),
            signal=None if ended_by is None else signal_name(ended_by),
            timed_out=self.timed_out,
        )

    def _waited(self) -> tuple[int, float]:
        """Return the command's return code and when it ended, once waited for."""
        code = self._running().returncode
        if code is None or self._ended is None:
            msg = "the command was not waited for"
            raise RuntimeError(msg)
        return code, self._ended

    def _status(self, code: int) -> int:
        """Return the shell's status for the command's return code."""
        if self.timed_out:
            return EXIT_TIMED_OUT
        return code if code >= 0 else 128 - code

    def _start(self) -> None:
        name = self.command[0]
        self._started = self._clock()
        try:
            self._process = subprocess.Popen(  # noqa: S603 - the user's own command
                self.command,
                # In its own group the command is in the background: reading a
                # terminal would stop it (SIGTTIN), so a terminal is not passed on.
                stdin=subprocess.DEVNULL if _stdin_is_a_terminal() else None,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        except FileNotFoundError:
            raise CommandNotStartedError(
                name, EXIT_NOT_FOUND, "command not found"
            ) from None
        except OSError as error:  # EACCES, ENOEXEC, ...: it cannot be executed
            why = (error.strerror or str(error)).lower()
            raise CommandNotStartedError(name, EXIT_NOT_EXECUTABLE, why) from None
        if self.timeout is not None:
            self._killer = threading.Timer(self.timeout, self._expire)
            self._killer.daemon = True
            self._killer.start()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            msg = "the command was not started"
            raise RuntimeError(msg)
        return self._process

    def _forward(self, signum: int, _frame: FrameType | None) -> None:
        """Pass a signal sent to spillvault on to the command's whole group."""
        self.signalled = signum
        self._stop(signum)
        self._arm_kill()

    def _expire(self) -> None:
        self.timed_out = True
        self._stop(signal.SIGTERM)
        self._arm_kill()

    def _arm_kill(self) -> None:
        if self._killer is not None:
            self._killer.cancel()
        self._killer = threading.Timer(GRACE_SECONDS, self._stop, (signal.SIGKILL,))
        self._killer.daemon = True
        self._killer.start()

    def _stop(self, signum: int) -> None:
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signum)

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()


def _stdin_is_a_terminal() -> bool:
    try:
        return os.isatty(0)
    except OSError:
        return False


def signal_name(signum: int) -> str:
    """Return a signal's name as `kill -l` gives it: `SIGTERM`, `SIGRTMIN+6`."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        # Python names only the first and last real-time signals.
        return f"SIGRTMIN+{signum - signal.SIGRTMIN}"


def _shown_argument(arg: str) -> str:
    r"""Return an argument as text; bytes that are not UTF-8 show as `\xff`."""
    return os.fsencode(arg).decode("utf-8", "backslashreplace")


__all__ = [
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "EXIT_OWN_FAILURE",
    "EXIT_TIMED_OUT",
    "CommandNotStartedError",
    "CommandRun",
    "signal_name",
]
