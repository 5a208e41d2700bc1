"""`spillvault hook run <client> <event>`: the hot path, run on every tool call.

It reads the event's JSON on stdin and prints the client's answer. It fails
open: any error prints the client's no-op answer, one line on stderr, and
exit status 0, so the tool call goes on as it was. Nothing heavy is imported
until an output is over its limit and must be stored.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import IO, TYPE_CHECKING, Any, Final

from spillvault.adapters.hooks.client import STORED, HookContext
from spillvault.adapters.hooks.registry import client_named

if TYPE_CHECKING:
    from collections.abc import Mapping

    from spillvault.adapters.hooks.client import HookClient

OUTPUT_LIMIT_CHARS: Final = 30_000
"""The most a gated output shows: Claude Code shows 30,000 characters of a
shell's output inline and spills anything over 50,000, Gemini CLI cuts at
40,000 and Codex at 10 KB; a preview of this size passes all of them."""


def run_hook(  # noqa: PLR0913 - the process's streams and environment, injected
    client_name: str,
    event: str,
    *,
    stdin: IO[str],
    stdout: IO[str],
    stderr: IO[str],
    environ: Mapping[str, str],
) -> int:
    """Answer one event; always exit 0 (the clients read 2 as "block")."""
    client = None
    try:
        client = client_named(client_name)
        payload = _payload(client, event, stdin.read())
        context = HookContext(
            spillvault=_spillvault(environ), environ=environ, gate=_gate
        )
        answer = client.respond(event, payload, context)
    except Exception as error:  # noqa: BLE001 - fail open: the call goes on as it was
        stderr.write(
            f"spillvault hook {client_name} {event}: {type(error).__name__}: {error}\n"
        )
        answer = client.no_op(event) if client is not None else "{}"
    stdout.write(answer + ("\n" if answer else ""))
    stdout.flush()
    return 0


def _payload(client: HookClient, event: str, text: str) -> dict[str, Any]:
    """Return the event's JSON object, or say why there is none to answer."""
    if event not in client.events:
        known = ", ".join(client.events)
        msg = f"{client.title} has no {event!r} hook; known: {known}"
        raise ValueError(msg)
    payload = json.loads(text or "{}")
    if not isinstance(payload, dict):
        msg = "the event is not a JSON object"
        raise TypeError(msg)
    return payload


def main(client_name: str, event: str) -> int:
    """Run one event from the process's own streams."""
    return run_hook(
        client_name,
        event,
        stdin=sys.stdin,
        stdout=sys.stdout,
        stderr=sys.stderr,
        environ=os.environ,
    )


def _spillvault(environ: Mapping[str, str]) -> str:
    """Return the spillvault command the rewritten commands call: this one."""
    own = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(own) == "spillvault" and os.access(own, os.X_OK):
        return own
    return shutil.which("spillvault", path=environ.get("PATH")) or "spillvault"


def _gate(text: str, tool: str, session: str) -> str | None:
    """Return what the model should see of `text`; None when it is short enough."""
    if len(text) <= OUTPUT_LIMIT_CHARS - 1_000:
        return None  # the common case: no session, no import, nothing stored
    if text.startswith(STORED):
        return None  # a preview already (a wrapped command's): never stored twice
    from spillvault.adapters.hooks.outputs import gate_output  # noqa: PLC0415 - heavy, rare

    return gate_output(text, tool, session, OUTPUT_LIMIT_CHARS)


__all__ = ["OUTPUT_LIMIT_CHARS", "main", "run_hook"]
