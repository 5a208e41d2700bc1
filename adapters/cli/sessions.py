"""Which session a command works on: flags, environment, the handle, the root."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from spillvault.adapters.session import open_session, vault_from_environment
from spillvault.adapters.storage.object_store import vault_session_ids
from spillvault.adapters.storage.s3_client import s3_client
from spillvault.adapters.storage.session_root import (
    new_session_dir,
    session_dir_for,
    session_dir_of_path,
    session_id_of,
    session_root,
    sessions_under,
)
from spillvault.domain.errors import (
    ArtifactAccessError,
    ArtifactSessionNotFoundError,
    ArtifactSessionReadOnlyError,
)

if TYPE_CHECKING:
    import argparse

    from spillvault.adapters.session import Session

SESSION_ENV: Final = "SPILLVAULT_SESSION"


def chosen_session(args: argparse.Namespace) -> str | None:
    """Return the session `--session` or `$SPILLVAULT_SESSION` names, if any."""
    value = getattr(args, "session", None) or os.environ.get(SESSION_ENV)
    return session_dir_for(value) if value else None


def session_to_create(args: argparse.Namespace) -> str:
    """Return the session `run` writes to: the chosen one, else a new one."""
    return chosen_session(args) or new_session_dir()


def required_session(args: argparse.Namespace) -> str:
    """Return the chosen session, or say how to choose one."""
    chosen = chosen_session(args)
    if chosen is None:
        msg = (
            "no session chosen: pass --session DIR|ID or set "
            f"${SESSION_ENV} (sessions live under {session_root()})"
        )
        raise ArtifactSessionNotFoundError(msg)
    return chosen


def session_of_handle(args: argparse.Namespace, handle: str) -> str:
    """Return the session that holds `handle`, from any working directory.

    `--session` wins; then `$SPILLVAULT_SESSION` when it is the handle's own
    session; then the session directory of an absolute artifact path; then
    the handle's session id under the root.
    """
    if getattr(args, "session", None):
        return session_dir_for(args.session)
    wanted = session_id_of(handle)
    env = os.environ.get(SESSION_ENV)
    if env and wanted is not None:
        candidate = session_dir_for(env)
        if os.path.basename(candidate) == wanted:
            return candidate
    by_path = session_dir_of_path(handle)
    if by_path is not None:
        return by_path
    if wanted is None:
        msg = (
            f"not an artifact handle: {handle[:300]!r} (a handle is "
            "<session-id>/<number>, as the notice shows it)"
        )
        raise ArtifactAccessError(msg)
    path = os.path.join(session_root(), wanted)
    if not os.path.isdir(path) and not vault_from_environment():
        msg = (
            f"no session {wanted!r} under {session_root()}: pass --session DIR "
            f"if it lives elsewhere (or set ${SESSION_ENV})"
        )
        raise ArtifactSessionNotFoundError(msg)
    return path


def sessions_to_list(args: argparse.Namespace) -> list[str]:
    """Return the chosen session, else every session under the root (or vault)."""
    chosen = chosen_session(args)
    if chosen is not None:
        return [chosen]
    vault = vault_from_environment()
    if vault:
        ids = vault_session_ids(vault["artifacts"], s3_client())
        return [os.path.join(session_root(), name) for name in ids]
    return sessions_under(session_root())


def open_existing(args: argparse.Namespace) -> Session:
    """Open the chosen existing session for a command that writes."""
    return open_session(required_session(args), mode="open", **vault_from_environment())


def open_for_reading(path: str) -> Session:
    """Open an existing session to read it; a read-only one opens as a view.

    A writable session is opened as usual (its recovery pass runs and a short
    journal is caught up); only one we may not write falls back to the view.
    """
    vault = vault_from_environment()
    try:
        return open_session(path, mode="open", **vault)
    except ArtifactSessionReadOnlyError:
        return open_session(path, mode="read", **vault)


__all__ = [
    "SESSION_ENV",
    "chosen_session",
    "open_existing",
    "open_for_reading",
    "required_session",
    "session_of_handle",
    "session_to_create",
    "sessions_to_list",
]
