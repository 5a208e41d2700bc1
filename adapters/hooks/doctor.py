"""`spillvault hook doctor <client>`: prove the installed hook takes effect.

Silent non-application is the common failure of agent hooks: a version that
drops a field, a second hook, a permission mode. The doctor therefore runs
the hook exactly as the client would, the command line from the client's own
configuration through `sh -c`, with the client's stdin JSON, and follows
through: a shell command is rewritten, the rewrite runs a 5 MB output, the
model would see a bounded preview naming a handle, and that handle reads
back the exact line. An output hook is fed a 5 MB tool result and must answer
with a preview and a handle, in the client's own format.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from spillvault.adapters.hooks.entry import OUTPUT_LIMIT_CHARS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from spillvault.adapters.hooks.client import HookClient

CANARY_LINES: Final = 300_000
CANARY_LINE: Final = 123_456
CANARY_COMMAND: Final = f"seq 1 {CANARY_LINES} | sed 's/^/doctor line /'"
RUN_SECONDS: Final = 120
_HANDLE: Final = re.compile(r"\[tool result stored as (\S+?);")


@dataclass(frozen=True)
class Finding:
    """One check: passed or not, and what it saw."""

    ok: bool
    text: str


def _ok(text: str) -> Finding:
    return Finding(ok=True, text=text)


def _fail(text: str) -> Finding:
    return Finding(ok=False, text=text)


def client_version(client: HookClient, environ: Mapping[str, str]) -> str | None:
    """Return the first line the client's version command prints, or None."""
    try:
        done = subprocess.run(  # noqa: S603 - the client's own command, no shell
            list(client.version_command),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
            env=dict(environ),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    # Some clients print their version on stderr.
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return lines[0] if lines and done.returncode == 0 else None


def diagnose(  # noqa: PLR0913 - what one diagnosis needs, all keyword-only
    client: HookClient,
    *,
    config: Path,
    spillvault: str,
    cwd: str,
    environ: Mapping[str, str],
    version: str | None,
) -> list[Finding]:
    """Check the installation at `config` end to end; return every finding."""
    findings = [_ok(f"{client.title}: {version or 'not found on PATH'}")]
    try:
        text = config.read_text()
    except OSError as error:
        return [*findings, _fail(f"{config}: {error.strerror or error}")]
    if not client.installed(text):
        hint = f"run `spillvault hook install {client.name}`"
        return [*findings, _fail(f"{config}: no spillvault hook ({hint})")]
    commands = client.hook_commands(text)
    findings.append(_ok(f"{config}: hooks for {', '.join(sorted(commands))}"))
    home = Path(environ.get("HOME") or Path.home())
    findings += [
        Finding(ok=ok, text=what) for ok, what in client.readiness(config, home)
    ]
    env = dict(environ)
    if client.shell_event is not None and client.shell_event in commands:
        findings += _shell(client, commands[client.shell_event], spillvault, cwd, env)
    if client.output_event is not None and client.output_event in commands:
        findings += _output(client, commands[client.output_event], cwd, env)
    return findings


def _run_hook(command: str, stdin: str, cwd: str, env: dict[str, str]) -> str:
    """Run an installed hook as the clients do: `sh -c COMMAND`, JSON on stdin."""
    done = subprocess.run(  # noqa: S603 - the hook line from the user's configuration
        ["/bin/sh", "-c", command],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=RUN_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        msg = f"exited {done.returncode}: {done.stderr.strip()[:300]}"
        raise RuntimeError(msg)
    return done.stdout


def _output_of(argv: list[str], cwd: str, env: dict[str, str]) -> str:
    """Return what a command prints, stdout then stderr, as an agent's shell sees it."""
    done = subprocess.run(  # noqa: S603 - the rewrite under test, or our own read
        argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=RUN_SECONDS,
        check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


def _shell(
    client: HookClient, command: str, spillvault: str, cwd: str, env: dict[str, str]
) -> list[Finding]:
    """Rewrite a canary command, run the rewrite, read its handle back."""
    event = client.shell_event or ""
    try:
        answer = _run_hook(
            command, json.dumps(client.shell_canary(CANARY_COMMAND, cwd)), cwd, env
        )
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        return [_fail(f"{event}: the hook failed: {error}")]
    problems = client.check(event, answer.strip())
    rewritten = client.rewritten(answer.strip())
    if problems or rewritten is None:
        why = "; ".join(problems) or "the answer does not rewrite the command"
        return [_fail(f"{event}: {why}: {answer.strip()[:300]!r}")]
    found = [_ok(f"{event}: the command is rewritten to {rewritten[:120]}…")]
    seen = _output_of(["/bin/bash", "-c", rewritten], cwd, env)
    return found + _handle_findings(event, seen, spillvault, env, cwd)


def _output(
    client: HookClient, command: str, cwd: str, env: dict[str, str]
) -> list[Finding]:
    """Feed a 5 MB tool result to the output hook; expect a preview with a handle."""
    event = client.output_event or ""
    output = "".join(f"doctor line {n}\n" for n in range(1, CANARY_LINES + 1))
    try:
        answer = _run_hook(
            command, json.dumps(client.output_canary(output, cwd)), cwd, env
        )
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as error:
        return [_fail(f"{event}: the hook failed: {error}")]
    problems = client.check(event, answer.strip())
    shown = client.shown(answer.strip())
    if problems or shown is None:
        why = "; ".join(problems) or "the answer does not replace the output"
        return [_fail(f"{event}: {why}: {answer.strip()[:300]!r}")]
    match = _HANDLE.search(shown)
    ok = match is not None and len(shown) <= OUTPUT_LIMIT_CHARS
    what = f"a {len(shown):,}-character preview of {match[1]}" if match else "no handle"
    return [Finding(ok=ok, text=f"{event}: a 5 MB tool result becomes {what}")]


def _handle_findings(
    event: str, seen: str, spillvault: str, env: dict[str, str], cwd: str
) -> list[Finding]:
    """Check the preview the model would see, and read the line back by its handle."""
    match = _HANDLE.search(seen)
    if match is None or len(seen) > OUTPUT_LIMIT_CHARS:
        return [_fail(f"{event}: the rewritten command printed {len(seen):,} "
                        "characters without a spillvault handle")]  # fmt: skip
    handle = match[1]
    found = [_ok(f"{event}: 5 MB of output shows as {len(seen):,} characters "
                     f"naming {handle}")]  # fmt: skip
    read = [spillvault, "read", handle, "--line", str(CANARY_LINE), "--limit", "1"]
    said = _output_of(read, cwd, env).strip()
    ok = f"doctor line {CANARY_LINE}" in said
    call = f"spillvault read {shlex.quote(handle)} --line {CANARY_LINE}"
    first = said.splitlines()[0] if said else "(nothing)"
    found.append(Finding(ok=ok, text=f"{call}: {first[:200]}"))
    return found


__all__ = ["CANARY_COMMAND", "Finding", "client_version", "diagnose"]
