"""Build a Hyperscan database once per machine, not once per process (S1.6).

Compiling the key-line screen and the recognizer rules takes a few hundred
milliseconds, and `spillvault run` is a new process for every command a
coding agent runs. A database is pure data of its patterns, flags and the
engine's version, so an adapter may keep the serialized form (`use_cache`);
the domain itself never touches a file. A cached form that does not load
(another engine, a damaged file) is compiled again.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, Protocol

try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel is a dependency on Linux
    hyperscan = None  # type: ignore[assignment]


class DatabaseCache(Protocol):
    """Where serialized databases are kept, by a key of what they were built from."""

    def load(self, key: str) -> bytes | None:
        """Return the bytes saved under `key`, if any (never raises)."""

    def save(self, key: str, data: bytes) -> None:
        """Keep `data` under `key`, if it can (never raises)."""


_VERSION: Final = getattr(hyperscan, "__version__", "none")
_cache: DatabaseCache | None = None


def use_cache(cache: DatabaseCache | None) -> None:
    """Keep the databases built from now on in `cache` (None: compile each time)."""
    global _cache  # noqa: PLW0603 - one cache per process, set by the composition root
    _cache = cache


def build(expressions: list[bytes], flags: list[int]) -> Any:
    """Return a block-mode database of `expressions` (ids in order); may raise."""
    key = hashlib.sha256(repr((_VERSION, expressions, flags)).encode()).hexdigest()
    cache = _cache
    if cache is not None and (data := cache.load(key)) is not None:
        try:
            return hyperscan.loadb(bytes(data), hyperscan.HS_MODE_BLOCK)
        except (hyperscan.error, TypeError, ValueError):
            pass  # another engine's form, or a damaged one: compile it again
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(
        expressions=expressions,
        ids=list(range(len(expressions))),
        elements=len(expressions),
        flags=flags,
    )
    if cache is not None:
        cache.save(key, bytes(hyperscan.dumpb(database)))
    return database


__all__ = ["DatabaseCache", "build", "use_cache"]
