"""Fault injection: a filling-up disk and real tmpfs mounts (root; required in CI)."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import pytest

from support.pgserver import in_ci

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from support.intercept import Call


@dataclass
class FullDisk:
    """An `around` hook for `write`: a disk with `room` bytes left, then `err`.

    `room` more bytes land (a short write may take the last of them, as a
    nearly full disk does), then every write raises `err`; `failures` counts
    the writes refused.
    """

    room: int
    err: int = errno.ENOSPC
    failures: int = 0

    def __call__(self, call: Call, write: Callable[..., int]) -> int:
        """Write what still fits, or fail."""
        if self.room <= 0:
            self.failures += 1
            raise OSError(self.err, os.strerror(self.err))
        written = write(call["fd"], call["data"][: self.room])
        self.room -= written
        return written


def unavailable(reason: str) -> NoReturn:
    """Skip on a developer machine; in CI a missing capability is a failure."""
    if in_ci():
        pytest.fail(f"{reason} (CI must run the real-kernel tests)")
    pytest.skip(reason)


def require_root() -> None:
    if os.geteuid() != 0:
        unavailable(f"real mounts and capabilities need root (uid {os.geteuid()})")


@contextmanager
def tmpfs(mount_point: Path, options: str) -> Iterator[Path]:
    """Mount a private tmpfs with `options`; always unmount it afterwards."""
    require_root()
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"{options},mode=0700", "tmpfs", mount_point],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        unavailable(f"running as root but mount failed: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        # A closed session's lock keeps a directory fd until it is collected;
        # a captured log record's exception can keep a session alive (its
        # frames): then detach lazily, the kernel frees it when the fd closes.
        gc.collect()
        done = subprocess.run(["umount", mount_point], capture_output=True, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", mount_point], check=True)


@contextmanager
def mounted_tmpfs(mount_point: Path, size: str = "1m") -> Iterator[Path]:
    """Mount a private tmpfs of `size` at `mount_point` (see `tmpfs`)."""
    with tmpfs(mount_point, f"size={size}") as mounted:
        yield mounted
