"""The filesystem seam and the safe idioms on it (S2.7, A1, A2, A4)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.storage.fs import (
    OS_FILESYSTEM,
    OsFileSystem,
    create_private_file,
    open_private_dir,
    read_private_file,
    write_all,
    write_new_file,
)
from spillvault.domain.errors import ArtifactAccessError

from support.intercept import InterceptingFS
from support.tiers import HANG_GUARD_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from support.intercept import Call


def three_bytes(call: Call, write: Callable[..., int]) -> int:
    """Write at most three bytes, as a pipe or a full disk may."""
    return write(call["fd"], call["data"][:3])


def nothing(call: Call, write: Callable[..., int]) -> int:
    """Write no byte at all."""
    return 0


@pytest.fixture
def dir_fd(tmp_path: Path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_production_seam_is_the_os_itself() -> None:
    assert OsFileSystem.write is os.write
    assert OsFileSystem.fsync is os.fsync
    assert OsFileSystem.open is os.open


def test_write_all_loops_on_short_writes(tmp_path: Path, dir_fd: int) -> None:
    fs = InterceptingFS()
    short = fs.around("write", three_bytes)
    fd = create_private_file(fs, "f", dir_fd=dir_fd)
    write_all(fs, fd, b"0123456789")
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"0123456789"
    assert short.hits == 4


def test_write_all_raises_when_no_progress_is_made(dir_fd: int) -> None:
    fs = InterceptingFS()
    fs.around("write", nothing, nth=2)
    fs.around("write", three_bytes)
    fd = create_private_file(fs, "f", dir_fd=dir_fd)
    with pytest.raises(OSError, match="no progress") as caught:
        write_all(fs, fd, b"0123456789")
    os.close(fd)
    assert caught.value.errno == errno.EIO


def test_private_files_are_exclusive_0600_and_never_follow_links(
    tmp_path: Path, dir_fd: int
) -> None:
    old = os.umask(0)
    try:
        write_new_file(OS_FILESYSTEM, "new", b"data", dir_fd=dir_fd)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_new_file(OS_FILESYSTEM, "new", b"other", dir_fd=dir_fd)
    assert (tmp_path / "new").read_bytes() == b"data"
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):
        create_private_file(OS_FILESYSTEM, "link", dir_fd=dir_fd)
    assert not (tmp_path / "target").exists()


def test_private_dirs_refuse_links_and_loose_modes(tmp_path: Path, dir_fd: int) -> None:
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ArtifactAccessError, match="symlink"):
        open_private_dir(OS_FILESYSTEM, "link", dir_fd=dir_fd)
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose").chmod(0o755)
    with pytest.raises(ArtifactAccessError, match="open to group or others"):
        open_private_dir(OS_FILESYSTEM, "loose", dir_fd=dir_fd)
    (tmp_path / "plain").write_text("x")
    with pytest.raises(ArtifactAccessError, match="not a directory"):
        open_private_dir(OS_FILESYSTEM, "plain", dir_fd=dir_fd)
    old = os.umask(0o777)
    try:
        fd = open_private_dir(OS_FILESYSTEM, "fresh", dir_fd=dir_fd)
    finally:
        os.umask(old)
    os.close(fd)
    assert stat.S_IMODE(os.stat(tmp_path / "fresh").st_mode) == 0o700


def test_reading_a_fifo_never_blocks(tmp_path: Path, dir_fd: int) -> None:
    os.mkfifo(tmp_path / "fifo", 0o600)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_private_file(OS_FILESYSTEM, "fifo", dir_fd=dir_fd, limit=10)
        except BaseException as error:
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(HANG_GUARD_SECONDS)  # a blocked read never returns
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert isinstance(outcome[0], ArtifactAccessError)
    assert "not a regular file" in str(outcome[0])


def test_reading_refuses_oversized_and_foreign_mode_files(
    tmp_path: Path, dir_fd: int
) -> None:
    write_new_file(OS_FILESYSTEM, "big", b"x" * 11, dir_fd=dir_fd)
    with pytest.raises(ArtifactAccessError, match="larger than 10 bytes"):
        read_private_file(OS_FILESYSTEM, "big", dir_fd=dir_fd, limit=10)
    (tmp_path / "open").write_text("x")
    (tmp_path / "open").chmod(0o644)
    with pytest.raises(ArtifactAccessError, match="open to group or others"):
        read_private_file(OS_FILESYSTEM, "open", dir_fd=dir_fd, limit=10)
    assert read_private_file(OS_FILESYSTEM, "big", dir_fd=dir_fd, limit=11) == b"x" * 11
