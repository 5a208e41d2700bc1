r"""Key-line patterns run by Hyperscan: time linear in the line, whatever the pattern.

Python's `re` backtracks: `^(a+)+$` takes exponential time on a line of a's
that ends wrong, and the gate must always return (S1.2). Hyperscan runs every
pattern as an automaton and refuses, at load time, what it cannot run that way
(backreferences, lookarounds, atomic groups, possessive quantifiers). A line
matches when any pattern matches anywhere in it, caseless (Unicode simple case
folding), as `re.search` with IGNORECASE did. Hyperscan's Unicode mode has no
`\b`, so `\w`, `\d`, `\s` and `\b` are ASCII; the built-in patterns alone keep
Python's Unicode word boundaries, through an ASCII stand-in of the line (see
`ascii_stand_in`). Each line is scanned on its own, so `^`, `$` and a cut at
the scanned length mean what they meant; a scan never crosses a line.
"""

from __future__ import annotations

import re
import threading
from contextlib import suppress
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, Self

from .hyperscan_build import build

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

try:
    import hyperscan
except ImportError:  # pragma: no cover - the wheel is a dependency on Linux
    hyperscan = None  # type: ignore[assignment]

MAX_PATTERNS: Final = 64
SCAN_CHARS: Final = 500
"""A line is judged on its first 500 characters (see `key_lines`)."""
MAX_PATTERN_CHARS: Final = 1000
"""Bounds on what one policy makes Hyperscan compile (its time and memory grow
with both; longer patterns are refused by Hyperscan as too large anyway)."""

_FLAGS: Final = (
    0
    if hyperscan is None
    else hyperscan.HS_FLAG_CASELESS
    | hyperscan.HS_FLAG_UTF8
    | hyperscan.HS_FLAG_SINGLEMATCH  # one report per pattern is all a yes needs
    | hyperscan.HS_FLAG_ALLOWEMPTY  # `x*` matches every line, as re.search said
)
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# The only characters beyond ASCII that re.IGNORECASE equates with an ASCII
# letter (a test checks all of Unicode); every other one is told apart from
# letters by the built-in patterns only as a word character or not.
_ODD_LETTER: Final = re.compile("[\u0130\u0131\u017f\u212a]")
_ODD_LETTERS: Final = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
_WORD_BEYOND_ASCII: Final = re.compile(r"[^\W\x00-\x7f]")
_BEYOND_ASCII: Final = re.compile(r"[^\x00-\x7f]")


def ascii_stand_in(line: str) -> str:
    r"""Return `line` in ASCII as patterns of letters, spaces, \w and \b see it."""
    # A letter re.IGNORECASE equates with an ASCII one becomes that letter, any
    # other word character beyond ASCII "_", anything else beyond ASCII "!": such
    # patterns match the stand-in exactly where Python's re matches the line, and
    # Hyperscan reads ASCII with no Unicode mode (which has no \b) needed.
    line = _ODD_LETTER.sub(lambda odd: _ODD_LETTERS[odd[0]], line)
    return _BEYOND_ASCII.sub("!", _WORD_BEYOND_ASCII.sub("_", line))


def _utf8(line: str) -> bytes:
    """Encode a line as valid UTF-8, as Hyperscan's UTF-8 mode requires."""
    try:
        return line.encode()
    except UnicodeEncodeError:
        # A lone surrogate is one character that no pattern can name (patterns
        # holding one are refused); U+FFFD keeps it one non-word character.
        return _SURROGATE.sub("\ufffd", line).encode()


def _rule_flags(caseless: bool) -> int:  # noqa: FBT001 - a rule's own setting
    """Hyperscan flags of a recognizer rule: lines as UTF-8, `^`/`$` at line ends."""
    flags = hyperscan.HS_FLAG_UTF8 | hyperscan.HS_FLAG_MULTILINE
    return flags | hyperscan.HS_FLAG_CASELESS if caseless else flags


def _stop(*_match: object) -> bool:
    """Stop the scan at the first match: a line is a key line or not."""
    return True


class _Database:
    """One compiled pattern set; a scratch per thread (a scan releases the GIL)."""

    def __init__(self, database: Any) -> None:
        self._database = database
        self._scratch = threading.local()

    def matches(self, data: bytes) -> bool:
        scratch = getattr(self._scratch, "value", None)
        if scratch is None:
            scratch = self._scratch.value = hyperscan.Scratch(self._database)
        try:
            self._database.scan(data, match_event_handler=_stop, scratch=scratch)
        except hyperscan.ScanTerminated:
            return True
        return False


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> _Database:
    """Compile non-empty `patterns` as one set; a policy rebuilt reuses it."""
    database = build(
        [pattern.encode() for pattern in patterns], [_FLAGS] * len(patterns)
    )
    return _Database(database)


def _engine_runs() -> bool:
    """Tell whether Hyperscan is installed and runs on this CPU."""
    if hyperscan is None:  # pragma: no cover
        return False
    try:
        _compiled(("error",))
    except hyperscan.error:  # pragma: no cover - a CPU without SSSE3
        return False
    return True


AVAILABLE: Final = _engine_runs()


class KeyLineMatcher:
    """Tell whether any of a policy's key-line patterns matches a line."""

    def __init__(
        self,
        stand_in: Callable[[str], bool] | None,
        custom: _Database | None,
    ) -> None:
        self._stand_in = stand_in
        self._custom = custom

    def __call__(self, line: str) -> bool:
        """Tell whether `line` is a key line."""
        if self._stand_in is not None and self._stand_in(
            line if line.isascii() else ascii_stand_in(line)
        ):
            return True
        return self._custom is not None and self._custom.matches(_utf8(line))

    def __copy__(self) -> Self:
        return self  # immutable; a scratch is per thread, never shared state

    def __deepcopy__(self, _memo: object) -> Self:
        return self


def compile_key_line_patterns(
    patterns: tuple[Any, ...], problems: list[str], *, built_in: Collection[str]
) -> KeyLineMatcher:
    """Compile `patterns`, recording each one that cannot run in linear time."""
    # Patterns in `built_in` are matched through ascii_stand_in, so they keep
    # Python's Unicode word boundaries; each must read only ASCII letters,
    # spaces, \w and \b for that to be exact.
    if len(patterns) > MAX_PATTERNS:
        problems.append(
            f"key_line_patterns holds {len(patterns)} patterns, at most {MAX_PATTERNS}"
        )
        return KeyLineMatcher(None, None)
    own: dict[int, str] = {}
    for index, pattern in enumerate(patterns):
        problem = _pattern_problem(pattern)
        if problem is not None:
            problems.append(f"key_line_patterns[{index}] {problem}")
        elif pattern not in built_in:
            own[index] = pattern
    stand_ins = tuple(
        dict.fromkeys(p for p in patterns if isinstance(p, str) and p in built_in)
    )
    if not AVAILABLE:  # pragma: no cover - Hyperscan is a dependency on Linux
        return _without_engine(stand_ins, own, problems)
    custom = _compile_own(own, problems)
    return KeyLineMatcher(_built_in_matcher(stand_ins) if stand_ins else None, custom)


def _built_in_matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Match ASCII lines against built-in patterns, compiled on the first line.

    Built-in patterns are known to compile, so a policy that never judges a
    line (`spillvault run` of a short output) never pays for compiling them.
    """
    database: _Database | None = None

    def matches(line: str) -> bool:
        nonlocal database
        if database is None:
            database = _compiled(patterns)
        return database.matches(line.encode("ascii"))

    return matches


def _pattern_problem(pattern: object) -> str | None:
    """Say what is wrong with one pattern before Hyperscan sees it, if anything."""
    if not isinstance(pattern, str):
        return f"must be a string, not {type(pattern).__name__}"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is longer than {MAX_PATTERN_CHARS} characters ({len(pattern)})"
    if "\x00" in pattern:
        # Hyperscan reads a pattern up to its first NUL: the rest would vanish.
        return r"holds a NUL character (write \x00)"
    if _SURROGATE.search(pattern):
        return "holds a lone surrogate, which no UTF-8 line contains"
    return None


def _compile_own(own: dict[int, str], problems: list[str]) -> _Database | None:
    """Compile the custom patterns as one set; name each one that fails alone."""
    unique = tuple(dict.fromkeys(own.values()))
    if not unique:
        return None
    try:
        return _compiled(unique)
    except hyperscan.error as error:
        together = error
    # Hyperscan names only the first failure of a set: try each on its own.
    found = len(problems)
    for index, pattern in own.items():
        try:
            _compiled((pattern,))
        except hyperscan.error as error:
            problems.append(f"key_line_patterns[{index}] does not compile: {error}")
    if len(problems) == found:  # each compiles alone: the set is too large
        problems.append(f"key_line_patterns do not compile together: {together}")
    return None


def _without_engine(  # pragma: no cover - Hyperscan is a dependency on Linux
    stand_ins: tuple[str, ...], own: dict[int, str], problems: list[str]
) -> KeyLineMatcher:
    """Run the built-in patterns with re (they never backtrack much); refuse others."""
    problems += [
        f"key_line_patterns[{index}] needs Hyperscan, which cannot run here"
        for index in own
    ]
    if not stand_ins:
        return KeyLineMatcher(None, None)
    joined = re.compile("|".join(f"(?:{p})" for p in stand_ins), re.IGNORECASE)
    return KeyLineMatcher(lambda line: joined.search(line) is not None, None)


@lru_cache(maxsize=16)
def compiled_rules(rules: tuple[tuple[str, bool], ...]) -> Any:
    """Compile (pattern, caseless) recognizer rules as one set, ids in order."""
    return build(
        [pattern.encode() for pattern, _ in rules],
        [_rule_flags(caseless) for _, caseless in rules],
    )


def rule_problems(rules: tuple[tuple[str, bool], ...], names: list[str]) -> list[str]:
    """Name each rule that cannot run in linear time (`names[i]` names rule i)."""
    problems = []
    for index, (pattern, _) in enumerate(rules):
        problem = _pattern_problem(pattern)
        if problem is not None:
            problems.append(f"{names[index]} pattern {problem}")
    if problems or not AVAILABLE:
        return problems
    try:
        compiled_rules(rules)
    except hyperscan.error:
        for index, rule in enumerate(rules):
            try:
                compiled_rules((rule,))
            except hyperscan.error as error:
                problems.append(f"{names[index]} pattern does not compile: {error}")
    return problems


class RuleMatcher:
    r"""Tell which recognizer rule (the lowest index) matches a line, if any.

    A rule matches when its pattern matches within the line's first
    `SCAN_CHARS` characters; the character after them, when there is one, is
    context for `$` and `\\b` as in the stored bytes, so a scan of whole lines
    (the screen) finds every line this says matches. Compiled on first use.
    """

    def __init__(self, rules: tuple[tuple[str, bool], ...]) -> None:
        self._rules = rules
        self._database: Any = None
        self._scratch = threading.local()

    def __bool__(self) -> bool:
        return bool(self._rules)

    def first(self, line: str) -> int | None:
        """Return the index of the first rule matching `line`, else None."""
        if not self._rules or not AVAILABLE:
            return None
        head = line[: SCAN_CHARS + 1]
        if head.isascii():
            data = head.encode("ascii")
            limit = min(len(data), SCAN_CHARS)
        else:
            data = _utf8(head)
            limit = len(_utf8(head[:SCAN_CHARS]))
        best: int | None = None

        def on_match(rule: int, _from: int, to: int, _flags: int, _ctx: object) -> bool:
            nonlocal best
            if to <= limit and (best is None or rule < best):
                best = rule
            return best == 0  # nothing beats the first rule

        database = self._database
        if database is None:
            database = self._database = compiled_rules(self._rules)
        scratch = getattr(self._scratch, "value", None)
        if scratch is None:
            scratch = self._scratch.value = hyperscan.Scratch(database)
        with suppress(hyperscan.ScanTerminated):
            database.scan(data, match_event_handler=on_match, scratch=scratch)
        return best

    def __copy__(self) -> Self:
        return self  # immutable; a scratch is per thread

    def __deepcopy__(self, _memo: object) -> Self:
        return self
