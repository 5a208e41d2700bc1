"""Find the lines a key-line judge must see in ASCII bytes, in one pass (S1.6).

Searching ten words with `bytes.find` reads a block ten times; Hyperscan reads
it once, at several GB/s, folding ASCII case itself. On ASCII, that folding is
exactly the screen's (`fold_case` only differs beyond ASCII). A policy's
screen is one database: the key words and every recognizer rule's own pattern
(with `^` and `$` at line ends), so a line any of them matches is a *hit*.
A hit's offset lies in its line: a word's start, a rule match's last byte.
Where Hyperscan cannot run (no wheel, or a CPU without SSSE3) `AVAILABLE` is
False and callers take the general path.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from .hyperscan_build import build
from .key_line_match import SCAN_CHARS, compiled_rules
from .policy import SCREEN_WORDS

if TYPE_CHECKING:
    from collections.abc import Callable

try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel is a dependency on Linux
    hyperscan = None  # type: ignore[assignment]

_WORDS: Final = tuple(word.encode("ascii") for word in SCREEN_WORDS)
LONGEST: Final = max(len(word) for word in _WORDS)
REACH: Final = 2 * 4 * (SCAN_CHARS + 1)
"""Bytes a window is widened by for rule matches: more than a judged line."""
RuleSpecs = tuple[tuple[str, bool], ...]


def _compile(rules: RuleSpecs) -> Any:
    if hyperscan is None:  # pragma: no cover
        return None
    flags = [hyperscan.HS_FLAG_CASELESS] * len(_WORDS)
    expressions = list(_WORDS)
    if rules:
        # The rules' own flags, as the judge compiles them (key_line_match).
        expressions += [pattern.encode() for pattern, _ in rules]
        flags += [_rule_flags(caseless) for _, caseless in rules]
    try:
        return build(expressions, flags)
    except hyperscan.error:  # pragma: no cover - an unsupported CPU
        return None


def _rule_flags(caseless: bool) -> int:  # noqa: FBT001 - a rule's own setting
    flags = hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_MULTILINE
    return flags | hyperscan.HS_FLAG_CASELESS if caseless else flags


_WORDS_ONLY: Final[Any] = _compile(())
AVAILABLE: Final = _WORDS_ONLY is not None


class Screen:
    """The words and a policy's recognizer rules, compiled on first use."""

    def __init__(self, rules: RuleSpecs) -> None:
        self.rules = rules
        self._database: Any = _WORDS_ONLY if not rules else None
        self._rules_only: Any = None
        self._scratch = threading.local()
        self._lock = threading.Lock()

    def _both(self) -> Any:
        if self._database is None:
            with self._lock:
                if self._database is None:
                    self._database = _compile(self.rules)
        return self._database

    def _scan(
        self, database: Any, data: memoryview, on_match: Callable[..., Any]
    ) -> None:
        scratches = getattr(self._scratch, "value", None)
        if scratches is None:
            scratches = self._scratch.value = {}
        scratch = scratches.get(id(database))
        if scratch is None:
            scratch = scratches[id(database)] = hyperscan.Scratch(database)
        with suppress(hyperscan.ScanTerminated):
            database.scan(data, match_event_handler=on_match, scratch=scratch)

    def each_hit(
        self, data: bytes, start: int, stop: int, visit: Callable[[int], bool]
    ) -> None:
        """Call `visit(offset)` for each hit in data[start:stop] (whole lines).

        Offsets ascend by where the match ends; `visit` returns True to stop.
        """
        view = memoryview(data)[start:stop]
        words = len(_WORDS)

        def on_match(hit: int, _from: int, to: int, _flags: int, _ctx: object) -> bool:
            if hit < words:
                return visit(start + to - len(_WORDS[hit]))
            return visit(start + max(to, 1) - 1)

        self._scan(self._both(), view, on_match)

    def hit_offsets(self, data: bytes, start: int, stop: int) -> list[int]:
        """Return the offsets of the hits in data[start:stop], ascending.

        A word that starts before `stop` and ends after it is found (the
        search reads up to `LONGEST - 1` bytes past `stop`); so is a rule
        match ending in the window, whatever line it is in (the search reads
        up to `REACH` bytes either side).
        """
        found: list[int] = []
        reach = REACH if self.rules else 0
        low = max(0, start - reach)
        view = memoryview(data)[low : min(len(data), stop + max(LONGEST - 1, reach))]
        words = len(_WORDS)

        def on_match(hit: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            at = low + to - len(_WORDS[hit]) if hit < words else low + max(to, 1) - 1
            if start <= at < stop:
                found.append(at)

        self._scan(self._both(), view, on_match)
        found.sort()
        return found

    def rule_hits(self, data: bytes, start: int, stop: int) -> list[int]:
        """Return the rule hits' offsets in data[start:stop] (whole lines), in order."""
        if not self.rules:
            return []
        if self._rules_only is None:
            self._rules_only = compiled_rules(self.rules)
        found: list[int] = []

        def on_match(_hit: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            found.append(start + max(to, 1) - 1)

        self._scan(self._rules_only, memoryview(data)[start:stop], on_match)
        found.sort()  # callers walk lines in order
        return found


@lru_cache(maxsize=16)
def screen_for(rules: RuleSpecs) -> Screen:
    """Return the screen of a set of recognizer rules (shared by equal policies)."""
    return Screen(rules)


_PLAIN: Final = Screen(())


def each_word(data: bytes, start: int, stop: int, visit: Callable[[int], bool]) -> None:
    """Call `visit(offset)` for each screen word starting in data[start:stop].

    Offsets ascend by where the word ends; `visit` returns True to stop.
    """
    _PLAIN.each_hit(data, start, stop, visit)


def word_starts(data: bytes, start: int, stop: int) -> list[int]:
    """Return the offsets of the screen words that start in data[start:stop], ascending.

    A word that starts before `stop` and ends after it is found (the search
    reads up to `LONGEST - 1` bytes past `stop`).
    """
    return _PLAIN.hit_offsets(data, start, stop)
