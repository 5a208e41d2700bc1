"""The cache directory of serialized databases: private, checked, best effort."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from spillvault.adapters.storage.hyperscan_cache import (
    DirectoryDatabaseCache,
    cache_directory,
)

if TYPE_CHECKING:
    from pathlib import Path


def test_what_is_saved_loads_back_from_a_private_file(tmp_path: Path) -> None:
    cache = DirectoryDatabaseCache(str(tmp_path / "c" / "hyperscan"))
    cache.save("k", b"payload")
    assert cache.load("k") == b"payload"
    assert cache.load("other") is None
    directory = tmp_path / "c" / "hyperscan"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE((directory / "k.hsdb").stat().st_mode) == 0o600
    assert [p.name for p in directory.iterdir()] == ["k.hsdb"]  # no tmp left


def test_a_file_that_does_not_check_out_is_ignored(tmp_path: Path) -> None:
    cache = DirectoryDatabaseCache(str(tmp_path))
    cache.save("k", b"payload")
    data = (tmp_path / "k.hsdb").read_bytes()
    (tmp_path / "k.hsdb").write_bytes(data[:-1] + b"X")
    assert cache.load("k") is None
    (tmp_path / "k.hsdb").write_bytes(b"short")
    assert cache.load("k") is None


def test_nothing_is_trusted_that_others_may_write(tmp_path: Path) -> None:
    cache = DirectoryDatabaseCache(str(tmp_path / "c"))
    cache.save("k", b"payload")
    (tmp_path / "c" / "k.hsdb").chmod(0o620)
    assert cache.load("k") is None
    (tmp_path / "c" / "k.hsdb").chmod(0o600)
    assert cache.load("k") == b"payload"
    (tmp_path / "c").chmod(0o777)
    assert cache.load("k") is None


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    cache = DirectoryDatabaseCache(str(tmp_path))
    cache.save("real", b"payload")
    os.symlink(tmp_path / "real.hsdb", tmp_path / "link.hsdb")
    assert cache.load("link") is None


def test_an_unwritable_place_only_costs_a_compile(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("in the way")
    cache = DirectoryDatabaseCache(str(tmp_path / "file" / "hyperscan"))
    cache.save("k", b"payload")  # no error
    assert cache.load("k") is None


def test_the_directory_follows_the_environment() -> None:
    assert cache_directory({"SPILLVAULT_CACHE": "/x"}) == "/x/hyperscan"
    assert cache_directory({"XDG_CACHE_HOME": "/y"}) == "/y/spillvault/hyperscan"
    relative = cache_directory({"XDG_CACHE_HOME": "rel", "SPILLVAULT_CACHE": "rel"})
    assert relative == os.path.expanduser("~/.cache/spillvault/hyperscan")
