"""Child-process entry points for the GC crash tests (test_gc_crash.py).

A crash sweep runs hundreds of short-lived children. `crash_server` is spawned
once (a fresh interpreter that imports the library once) and forks one child
per request, so each crash costs a fork, not an interpreter start-up.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

from spillvault.adapters.services.gc import apply_cleanup_from_journal
from spillvault.adapters.session import open_session
from spillvault.domain.cleanup import ArtifactCleanupPlan
from spillvault.domain.timestamps import parse_timestamp

from support.intercept import OPERATIONS, Call, InterceptingFS

CRASH_EXIT_CODE = 17


@dataclass(frozen=True)
class Die:
    """A `before` action: the process dies instead of the operation.

    It ends with `os._exit`, as a power cut would end it, with no cleanup, no
    `finally`, no flush; first, if `note` is a path, it writes there the
    operation that was not performed.
    """

    note: str | None = None

    def __call__(self, call: Call) -> NoReturn:
        """Leave the note, then die."""
        if self.note is not None:
            shown = call.args[0] if call.args and isinstance(call.args[0], str) else ""
            fd = os.open(self.note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, f"{call.op}({shown})".encode())
            os.close(fd)
        os._exit(CRASH_EXIT_CODE)


def apply_then_crash(
    session_dir: str, plan: dict[str, Any], now: str, crash_at: int, note: str
) -> None:
    """Open the session, then apply `plan`, dying at filesystem operation `crash_at`.

    Returns when the apply finished before operation `crash_at` came; otherwise
    the process dies with `CRASH_EXIT_CODE` and `note` names the operation
    that never happened.
    """
    fs = InterceptingFS()
    session = open_session(session_dir, fs=fs)
    crash = fs.before(OPERATIONS, Die(note), nth=crash_at)
    apply_cleanup_from_journal(
        session,
        ArtifactCleanupPlan.from_dict(plan),
        now=parse_timestamp(now, "now"),
    )
    crash.remove()
    session.close()


def crash_server(conn: Any) -> None:
    """Serve `apply_then_crash` requests from `conn`, one forked child each.

    Each request is the argument tuple of `apply_then_crash`; the answer is the
    child's exit code. `None` ends the server.
    """
    while (request := conn.recv()) is not None:
        pid = os.fork()
        if pid == 0:  # the child: no threads, no session open in this process
            code = 0
            try:
                apply_then_crash(*request)
            except BaseException:  # reported through the exit code
                traceback.print_exc()
                code = 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        conn.send(os.waitstatus_to_exitcode(status))
