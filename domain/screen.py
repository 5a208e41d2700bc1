"""Find the key-line screen words in ASCII bytes, all words in one pass (S1.6).

Searching ten words with `bytes.find` reads a block ten times; Hyperscan reads
it once, at several GB/s, folding ASCII case itself. On ASCII, that folding is
exactly the screen's (`fold_case` only differs beyond ASCII). Where Hyperscan
cannot run (no wheel, or a CPU without SSSE3) `AVAILABLE` is False and callers
take the general path.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final

from .policy import SCREEN_WORDS

if TYPE_CHECKING:
    from collections.abc import Callable

try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel is a dependency on Linux
    hyperscan = None  # type: ignore[assignment]

_WORDS: Final = tuple(word.encode("ascii") for word in SCREEN_WORDS)
LONGEST: Final = max(len(word) for word in _WORDS)


def _compile() -> Any:
    if hyperscan is None:  # pragma: no cover
        return None
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        database.compile(
            expressions=list(_WORDS),
            ids=list(range(len(_WORDS))),
            elements=len(_WORDS),
            flags=[hyperscan.HS_FLAG_CASELESS] * len(_WORDS),
        )
    except hyperscan.error:  # pragma: no cover - an unsupported CPU
        return None
    return database


_DATABASE: Final[Any] = _compile()
AVAILABLE: Final = _DATABASE is not None
_scratch = threading.local()  # a scan releases the GIL: one scratch per thread


def _scan(data: bytes | memoryview, on_match: Callable[..., bool | None]) -> None:
    scratch = getattr(_scratch, "value", None)
    if scratch is None:
        scratch = _scratch.value = hyperscan.Scratch(_DATABASE)
    with suppress(hyperscan.ScanTerminated):
        _DATABASE.scan(data, match_event_handler=on_match, scratch=scratch)


def each_word(data: bytes, start: int, stop: int, visit: Callable[[int], bool]) -> None:
    """Call `visit(offset)` for each screen word starting in data[start:stop].

    Offsets ascend by where the word ends; `visit` returns True to stop.
    """
    view = memoryview(data)[start:stop]

    def on_match(word: int, _from: int, to: int, _flags: int, _context: object) -> bool:
        return visit(start + to - len(_WORDS[word]))

    _scan(view, on_match)


def word_starts(data: bytes, start: int, stop: int) -> list[int]:
    """Return the offsets of the screen words that start in data[start:stop], ascending.

    A word that starts before `stop` and ends after it is found (the search
    reads up to `LONGEST - 1` bytes past `stop`).
    """
    found: list[int] = []
    view = memoryview(data)[start : min(len(data), stop + LONGEST - 1)]

    def on_match(word: int, _from: int, to: int, _flags: int, _context: object) -> None:
        at = start + to - len(_WORDS[word])
        if at < stop:
            found.append(at)

    _scan(view, on_match)
    found.sort()
    return found
