"""Everything that touches the world: stores, the filesystem seam, the CLI."""

from .eventstore import SessionStore, retrying
from .fs import OS_FILESYSTEM, OsFileSystem
from .session import Session, open_session
from .session_lock import SessionLock

__all__ = [
    "OS_FILESYSTEM",
    "OsFileSystem",
    "Session",
    "SessionLock",
    "SessionStore",
    "open_session",
    "retrying",
]
