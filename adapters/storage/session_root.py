"""Where sessions live: one root, one directory per session id.

The root is `$SPILLVAULT_HOME`, else `$XDG_STATE_HOME/spillvault`, else
`~/.local/state/spillvault`. New sessions get generated ids (64 random bits,
optionally after a chosen prefix), so a handle `<session-id>/<number>` names
one artifact across sessions and hosts, and finding its session is a lookup
under the root from any working directory.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
from typing import TYPE_CHECKING, Final

from spillvault.adapters.storage.layout import MARKER_NAME, TOOL_RESULTS_DIR
from spillvault.domain.errors import ArtifactAccessError
from spillvault.domain.handles import MAX_SESSION_ID_LENGTH, parse_handle
from spillvault.domain.values import check_session_id, parse_artifact_source_id

if TYPE_CHECKING:
    from collections.abc import Mapping

HOME_ENV: Final = "SPILLVAULT_HOME"
_TOKEN_CHARS: Final = 13  # 64 random bits in unpadded base32
MAX_PREFIX_LENGTH: Final = MAX_SESSION_ID_LENGTH - 1 - _TOKEN_CHARS
_PREFIX: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def session_root(environ: Mapping[str, str] | None = None) -> str:
    """Return the absolute directory that holds sessions by id."""
    env = os.environ if environ is None else environ
    home = env.get(HOME_ENV)
    if home:
        return os.path.abspath(home)
    state = env.get("XDG_STATE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "spillvault")


def new_session_id(prefix: str | None = None) -> str:
    """Return a fresh session id: 13 random base32 characters, after `prefix-`."""
    token = base64.b32encode(secrets.token_bytes(8)).decode().rstrip("=").lower()
    if prefix is None:
        return token
    if (
        not isinstance(prefix, str)
        or len(prefix) > MAX_PREFIX_LENGTH
        or _PREFIX.match(prefix) is None
    ):
        msg = (
            f"session name prefix must be 1-{MAX_PREFIX_LENGTH} letters, digits, "
            f"'.', '_' or '-' (starting with a letter or digit), not {prefix!r}"
        )
        raise ArtifactAccessError(msg)
    return f"{prefix}-{token}"


def new_session_dir(
    prefix: str | None = None, *, environ: Mapping[str, str] | None = None
) -> str:
    """Return the directory for a new session under the root (not created yet)."""
    return os.path.join(session_root(environ), new_session_id(prefix))


def session_dir_for(value: str, environ: Mapping[str, str] | None = None) -> str:
    """Return the directory `value` names: a path if it has a `/`, else an id."""
    if "/" in value:
        return os.path.abspath(value)
    try:
        check_session_id(value)
    except ValueError as error:
        raise ArtifactAccessError(str(error)) from None
    return os.path.join(session_root(environ), value)


def session_id_of(handle: str) -> str | None:
    """Return the session id a handle or source id names, else None."""
    parsed = parse_handle(handle)
    if parsed is not None:
        return parsed.session_id
    if handle.startswith("artifact:"):
        try:
            return parse_artifact_source_id(handle).session_id
        except ValueError:
            return None
    return None


def session_dir_of_path(handle: str) -> str | None:
    """Return the session directory of an artifact's absolute path, else None."""
    results = os.path.dirname(handle)
    if os.path.isabs(handle) and os.path.basename(results) == TOOL_RESULTS_DIR:
        return os.path.dirname(results)
    return None


def sessions_under(root: str) -> list[str]:
    """Return the session directories under `root`, oldest first."""
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            # The marker is written once, when the session is made.
            made = os.lstat(os.path.join(entry.path, MARKER_NAME)).st_mtime_ns
        except FileNotFoundError:
            continue  # not a session
        found.append((made, entry.path))
    return [path for _, path in sorted(found)]


__all__ = [
    "HOME_ENV",
    "MAX_PREFIX_LENGTH",
    "new_session_dir",
    "new_session_id",
    "session_dir_for",
    "session_dir_of_path",
    "session_id_of",
    "session_root",
    "sessions_under",
]
