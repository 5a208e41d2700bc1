"""Databases built once per machine: the cache port of the domain (S1.6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import hyperscan
import pytest

from spillvault.domain import hyperscan_build

if TYPE_CHECKING:
    from collections.abc import Iterator


class FakeDatabaseCache:
    """Keeps serialized databases in a dict, and counts what it was asked."""

    def __init__(self) -> None:
        self.saved: dict[str, bytes] = {}
        self.loads = 0

    def load(self, key: str) -> bytes | None:
        self.loads += 1
        return self.saved.get(key)

    def save(self, key: str, data: bytes) -> None:
        self.saved[key] = data


@pytest.fixture
def cache() -> Iterator[FakeDatabaseCache]:
    fake = FakeDatabaseCache()
    hyperscan_build.use_cache(fake)
    yield fake
    hyperscan_build.use_cache(None)


def hits(database: object, data: bytes) -> list[int]:
    found: list[int] = []
    database.scan(  # type: ignore[attr-defined]
        data,
        match_event_handler=lambda ident, *_: found.append(ident),
        scratch=hyperscan.Scratch(database),
    )
    return found


def test_a_second_build_loads_what_the_first_saved(cache: FakeDatabaseCache) -> None:
    first = hyperscan_build.build([b"error", b"^warn"], [0, 0])
    assert len(cache.saved) == 1
    second = hyperscan_build.build([b"error", b"^warn"], [0, 0])
    assert cache.loads == 2
    assert len(cache.saved) == 1
    assert hits(second, b"warn: an error") == hits(first, b"warn: an error") == [1, 0]


def test_other_patterns_or_flags_get_their_own_entry(cache: FakeDatabaseCache) -> None:
    hyperscan_build.build([b"error"], [0])
    hyperscan_build.build([b"error"], [1])  # caseless
    hyperscan_build.build([b"fail"], [0])
    assert len(cache.saved) == 3


def test_a_damaged_entry_is_compiled_again(cache: FakeDatabaseCache) -> None:
    hyperscan_build.build([b"error"], [0])
    (key,) = cache.saved
    cache.saved[key] = b"not a database"
    database = hyperscan_build.build([b"error"], [0])
    assert hits(database, b"an error") == [0]
    assert cache.saved[key] != b"not a database"  # saved again, rebuilt
