"""The filesystem seam (S2.7) and the few safe file idioms built on it (A1-A3).

Every durable file operation of the project goes through a `FileSystem`. The
production one binds the `os` functions themselves as static methods, so the
seam costs one attribute lookup; the crash-safety suite swaps in a simulator.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import stat
from contextlib import suppress
from typing import TYPE_CHECKING

from spillvault.domain.errors import ArtifactAccessError

if TYPE_CHECKING:
    from spillvault.domain.ports import FileSystem

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
EXCLUSIVE_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def _lstat(path: str, *, dir_fd: int | None = None) -> os.stat_result:
    return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)


def _link(
    src: str,
    dst: str,
    *,
    src_dir_fd: int | None = None,
    dst_dir_fd: int | None = None,
) -> None:
    os.link(
        src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False
    )


def _listdir(fd: int) -> list[str]:
    return os.listdir(fd)


class OsFileSystem:
    """The production seam: the operating system, called directly."""

    open = staticmethod(os.open)
    close = staticmethod(os.close)
    read = staticmethod(os.read)
    pread = staticmethod(os.pread)
    write = staticmethod(os.write)
    fsync = staticmethod(os.fsync)
    ftruncate = staticmethod(os.ftruncate)
    fstat = staticmethod(os.fstat)
    fchmod = staticmethod(os.fchmod)
    lstat = staticmethod(_lstat)
    mkdir = staticmethod(os.mkdir)
    link = staticmethod(_link)
    rename = staticmethod(os.rename)
    unlink = staticmethod(os.unlink)
    rmdir = staticmethod(os.rmdir)
    listdir = staticmethod(_listdir)
    flock = staticmethod(fcntl.flock)


OS_FILESYSTEM: FileSystem = OsFileSystem()


def write_all(fs: FileSystem, fd: int, data: bytes) -> None:
    """Write every byte of `data`, looping on short writes."""
    view = memoryview(data)
    while view:
        written = fs.write(fd, view.tobytes())
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def read_all(fs: FileSystem, fd: int, limit: int) -> bytes:
    """Read up to `limit` bytes from the current offset."""
    parts: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = fs.read(fd, min(remaining, 1 << 16))
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def check_private(fs: FileSystem, fd: int, what: str, *, directory: bool) -> None:
    """Raise unless `fd` is ours (owner = euid) with no group or other bits (A1)."""
    info = fs.fstat(fd)
    kind_ok = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    if not kind_ok:
        kind = "directory" if directory else "regular file"
        msg = f"{what} is not a {kind}"
        raise ArtifactAccessError(msg)
    if info.st_uid != os.geteuid():
        msg = f"{what} is not owned by this user (uid {info.st_uid})"
        raise ArtifactAccessError(msg)
    if info.st_mode & 0o077:
        msg = f"{what} is open to group or others (mode {info.st_mode & 0o777:o})"
        raise ArtifactAccessError(msg)


def open_private_dir(
    fs: FileSystem,
    name: str,
    *,
    dir_fd: int | None,
    what: str | None = None,
    create: bool = True,
) -> int:
    """Create (0700, whatever the umask) or open a private directory, never a link.

    `create=False` only opens: a missing directory raises `ArtifactAccessError`.
    """
    label = what or name
    created = False
    if create:
        try:
            fs.mkdir(name, PRIVATE_DIR_MODE, dir_fd=dir_fd)
            created = True
        except FileExistsError:
            pass
    try:
        fd = fs.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in {errno.ELOOP, errno.ENOTDIR}:
            msg = f"{label} is a symlink or not a directory"
            raise ArtifactAccessError(msg) from error
        if error.errno == errno.ENOENT and not create:
            msg = f"{label} is missing"
            raise ArtifactAccessError(msg) from error
        raise
    try:
        if created:
            fs.fchmod(fd, PRIVATE_DIR_MODE)
            if dir_fd is not None:
                fs.fsync(dir_fd)
        check_private(fs, fd, label, directory=True)
    except BaseException:
        fs.close(fd)
        raise
    return fd


def create_private_file(fs: FileSystem, name: str, *, dir_fd: int) -> int:
    """Create `name` exclusively, 0600 whatever the umask, never through a link (A2)."""
    fd = fs.open(name, EXCLUSIVE_CREATE, PRIVATE_FILE_MODE, dir_fd=dir_fd)
    try:
        fs.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        # The entry is ours (created exclusive just now): leave nothing behind.
        with suppress(OSError):
            fs.unlink(name, dir_fd=dir_fd)
        fs.close(fd)
        raise
    return fd


def tmp_name_for(name: str) -> str:
    """Return a fresh hidden tmp name beside `name` (see `is_tmp_for`)."""
    return f".{name}.tmp-{secrets.token_hex(8)}"


def is_tmp_for(entry: str, name: str) -> bool:
    """Say whether `entry` is a tmp name `tmp_name_for(name)` could have made."""
    prefix = f".{name}.tmp-"
    suffix = entry.removeprefix(prefix)
    return (
        entry.startswith(prefix)
        and len(suffix) == 16  # 8 random bytes in hex
        and all(c in "0123456789abcdef" for c in suffix)
    )


def write_new_file(fs: FileSystem, name: str, data: bytes, *, dir_fd: int) -> None:
    """Create `name` with `data` whole or not at all, durable when it returns.

    The bytes go to a fsynced tmp file that is then linked to `name` (never
    replacing an existing entry): a crash or an I/O error leaves either no
    `name` or the complete file, plus at most a stray tmp that the session's
    recovery pass removes.
    """
    tmp = tmp_name_for(name)
    fd = create_private_file(fs, tmp, dir_fd=dir_fd)
    try:
        try:
            write_all(fs, fd, data)
            fs.fsync(fd)
        finally:
            fs.close(fd)
        fs.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            fs.unlink(tmp, dir_fd=dir_fd)
        raise
    fs.unlink(tmp, dir_fd=dir_fd)
    fs.fsync(dir_fd)


def read_private_file(fs: FileSystem, name: str, *, dir_fd: int, limit: int) -> bytes:
    """Read a small file of ours (A4: no link, no FIFO), refusing anything else."""
    try:
        fd = fs.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            msg = f"{name} is a symlink"
            raise ArtifactAccessError(msg) from error
        raise
    try:
        check_private(fs, fd, name, directory=False)
        data = read_all(fs, fd, limit + 1)
    finally:
        fs.close(fd)
    if len(data) > limit:
        msg = f"{name} is larger than {limit} bytes"
        raise ArtifactAccessError(msg)
    return data


def exists(fs: FileSystem, name: str, *, dir_fd: int) -> bool:
    """Say whether a directory entry exists (a dangling symlink counts)."""
    try:
        fs.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True
