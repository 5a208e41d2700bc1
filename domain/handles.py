"""The artifact handle: `<session-id>/<number>`, the one name shown everywhere.

A handle holds no filesystem path, so it says nothing about the host and
means the same on any host that reaches the session. It is unique because
session ids are (generated ids carry 64 random bits) and numbers are never
reused within a session. Exactly one spelling is canonical: the number has
no sign, no leading zeros and no separators, so equal handles are equal
strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .errors import ArtifactAccessError
from .values import artifact_filename, artifact_number, check_session_id

MAX_ARTIFACT_DIGITS: Final = 12
"""Numbers stay below 10**12, so a handle is at most id + 13 characters."""
MAX_ARTIFACT_NUMBER: Final = 10**MAX_ARTIFACT_DIGITS - 1
MAX_HANDLE_LENGTH: Final = 64
MAX_SESSION_ID_LENGTH: Final = MAX_HANDLE_LENGTH - 1 - MAX_ARTIFACT_DIGITS
"""The longest id a new session may take, so its handles stay within 64."""
_NUMBER: Final = re.compile(r"[1-9][0-9]{0,11}\Z")


@dataclass(frozen=True)
class ArtifactHandle:
    """A parsed handle: which session, which artifact."""

    session_id: str
    number: int

    @property
    def filename(self) -> str:
        """Return the artifact's file name inside its session."""
        return artifact_filename(self.number)

    def __str__(self) -> str:
        return f"{self.session_id}/{self.number}"


def handle_of(session_id: str, filename: str) -> str:
    """Return the handle of artifact `filename` in session `session_id`."""
    number = artifact_number(filename)
    if number is None or number > MAX_ARTIFACT_NUMBER:
        msg = f"not an artifact filename: {filename!r}"
        raise ArtifactAccessError(msg)
    return str(ArtifactHandle(check_session_id(session_id), number))


def parse_handle(text: object) -> ArtifactHandle | None:
    """Return the handle `text` spells canonically, else None (never raises)."""
    if not isinstance(text, str) or "\x00" in text:
        return None
    session_id, slash, number = text.partition("/")
    if not slash or _NUMBER.match(number) is None:
        return None
    try:
        check_session_id(session_id)
    except ValueError:
        return None
    return ArtifactHandle(session_id, int(number))


__all__ = [
    "MAX_ARTIFACT_DIGITS",
    "MAX_ARTIFACT_NUMBER",
    "MAX_HANDLE_LENGTH",
    "MAX_SESSION_ID_LENGTH",
    "ArtifactHandle",
    "handle_of",
    "parse_handle",
]
