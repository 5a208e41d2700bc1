"""Fault injection for gate tests: a filling-up seam and a real tiny tmpfs."""

from __future__ import annotations

import errno
import os
import subprocess
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.fs import OsFileSystem

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


class FailingFS(OsFileSystem):
    """The real seam, with writes that hit a full disk once armed.

    `fail_writes_after(n)` lets `n` more bytes land (a short write may take the
    last of them, as a nearly full disk does), then every write raises `err`.
    """

    def __init__(self) -> None:
        self.bytes_left: int | None = None
        self.err = errno.ENOSPC
        self.failures = 0

    def fail_writes_after(self, nbytes: int, err: int = errno.ENOSPC) -> None:
        self.bytes_left = nbytes
        self.err = err

    def disarm(self) -> None:
        self.bytes_left = None

    def write(self, fd: int, data: bytes) -> int:  # type: ignore[override]
        if self.bytes_left is None:
            return os.write(fd, data)
        if self.bytes_left <= 0:
            self.failures += 1
            raise OSError(self.err, os.strerror(self.err))
        written = os.write(fd, data[: self.bytes_left])
        self.bytes_left -= written
        return written


@contextmanager
def mounted_tmpfs(mount_point: Path, size: str = "1m") -> Iterator[Path]:
    """Mount a private tmpfs of `size` at `mount_point`; skip unless root."""
    if os.geteuid() != 0:
        pytest.skip(
            f"mounting a tmpfs needs root (running as uid {os.geteuid()}); "
            "the injected-errno seam tests cover the same paths"
        )
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", mount_point],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"running as root but mount failed: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        done = subprocess.run(["umount", mount_point], check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", mount_point], check=False)
