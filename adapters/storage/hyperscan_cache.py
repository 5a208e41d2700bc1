"""Serialized Hyperscan databases in a private cache directory (S1.6, A2).

`$SPILLVAULT_CACHE`, else `$XDG_CACHE_HOME/spillvault`, else
`~/.cache/spillvault`; a subdirectory `hyperscan` of it, 0700. Each file is
the SHA-256 of its payload and the payload, created exclusively (0600) and
renamed into place, and read without following a symlink; one that does not
check out is ignored (and rebuilt), and so is everything in a directory or a
file that is not the user's alone to write. Every failure only costs a compile.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from typing import TYPE_CHECKING, Final

from spillvault.domain import hyperscan_build

if TYPE_CHECKING:
    from collections.abc import Mapping

CACHE_ENV: Final = "SPILLVAULT_CACHE"
_DIGEST: Final = hashlib.sha256().digest_size
_MAX_BYTES: Final = 64 << 20  # no database of ours comes near this


def cache_directory(environ: Mapping[str, str] | None = None) -> str:
    """Return the directory serialized databases are kept in."""
    env = os.environ if environ is None else environ
    root = env.get(CACHE_ENV, "")
    if not os.path.isabs(root):
        xdg = env.get("XDG_CACHE_HOME", "")
        # The XDG spec says a relative value is invalid and must be ignored.
        base = xdg if os.path.isabs(xdg) else os.path.expanduser("~/.cache")
        root = os.path.join(base, "spillvault")
    return os.path.join(root, "hyperscan")


class DirectoryDatabaseCache:
    """Keep serialized databases as checked files in one private directory."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def load(self, key: str) -> bytes | None:
        """Return the payload saved under `key` if it is ours and its digest checks."""
        try:
            if not _private(os.lstat(self._directory)):
                return None  # a directory others may write to: trust nothing in it
            fd = os.open(self._path(key), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if not _private(os.fstat(fd)):
                return None
            data = os.read(fd, _MAX_BYTES + _DIGEST + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        digest, payload = data[:_DIGEST], data[_DIGEST:]
        if (
            len(data) > _MAX_BYTES + _DIGEST
            or hashlib.sha256(payload).digest() != digest
        ):
            return None
        return payload

    def save(self, key: str, data: bytes) -> None:
        """Write `data` under `key`, atomically; give up quietly on any error."""
        tmp = os.path.join(self._directory, f".tmp-{secrets.token_hex(8)}")
        try:
            os.makedirs(self._directory, mode=0o700, exist_ok=True)
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
            try:
                view = memoryview(hashlib.sha256(data).digest() + data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, self._path(key))
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _path(self, key: str) -> str:
        return os.path.join(self._directory, f"{key}.hsdb")


def _private(info: os.stat_result) -> bool:
    """Tell whether a file or directory is this user's and only this user's to write."""
    return info.st_uid == os.getuid() and not info.st_mode & (
        stat.S_IWGRP | stat.S_IWOTH
    )


def install(environ: Mapping[str, str] | None = None) -> None:
    """Make the domain keep the databases it builds in the user's cache directory."""
    hyperscan_build.use_cache(DirectoryDatabaseCache(cache_directory(environ)))


__all__ = ["CACHE_ENV", "DirectoryDatabaseCache", "cache_directory", "install"]
