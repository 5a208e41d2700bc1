"""Needles: the lines of an output an agent must see, marked by rule (pure).

The rule, per output (the same needles score every policy):

- diagnostic: the first five distinct lines (exact text) matching the
  program's diagnostic pattern (its error and failure lines, never warnings);
  every line matching a planted failure's pattern; the last line matching the
  program's summary pattern ("3 failed, 2997 passed"); and, where a program
  prints a diagnostic's location on the next line (rustc's and ruff's
  ` --> file:line:col`), that location line.
- lookup: for a listing (grep, find, ls, tar, git log, cProfile), the first
  line matching the pattern of the one line the command was run to find.

A needle's text is its line with ANSI escapes removed, whitespace-trimmed; a
text printed twice (a runner's closing recap) is one needle, at its first
line, since a preview showing either copy shows what the agent needs. Line
numbers are 1-based; offsets are the line's first byte in the UTF-8 output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MAX_FIRST: Final = 5
ANSI: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


class NeedleRuleError(ValueError):
    """A rule's planted, summary or look-up pattern matched no line."""


@dataclass(frozen=True)
class Rule:
    """How needles are found in one output (see the module docstring)."""

    diagnostic: str | None = None
    summary: str | None = None
    planted: tuple[str, ...] = ()
    lookup: tuple[str, ...] = ()
    location_next: str | None = None


@dataclass(frozen=True)
class Needle:
    """A line an agent must see."""

    text: str
    kind: str
    line: int
    offset: int


def _hits(pattern: str, lines: list[str], what: str) -> list[int]:
    """Indexes of the lines matching `pattern`; at least one, or a named error."""
    compiled = re.compile(pattern)
    found = [i for i, line in enumerate(lines) if compiled.search(line)]
    if not found:
        msg = f"{what} pattern {pattern!r} matches no line"
        raise NeedleRuleError(msg)
    return found


def _first_distinct(pattern: str, lines: list[str]) -> list[int]:
    """The first MAX_FIRST lines matching `pattern` with distinct texts."""
    compiled, seen, found = re.compile(pattern), set[str](), list[int]()
    for i, line in enumerate(lines):
        if len(seen) == MAX_FIRST:
            break
        if compiled.search(line) and line.strip() not in seen:
            seen.add(line.strip())
            found.append(i)
    return found


def _diagnostics(rule: Rule, lines: list[str]) -> set[int]:
    """The indexes of the diagnostic needles."""
    chosen = set(_first_distinct(rule.diagnostic, lines) if rule.diagnostic else [])
    for planted in rule.planted:
        chosen.update(_hits(planted, lines, "planted"))
    if rule.summary:
        chosen.add(_hits(rule.summary, lines, "summary")[-1])
    if rule.location_next:
        where = re.compile(rule.location_next)
        chosen |= {
            i + 1 for i in chosen if i + 1 < len(lines) and where.search(lines[i + 1])
        }
    return chosen


def mark_needles(text: str, rule: Rule) -> list[Needle]:
    """Apply the needle rule of the module docstring to one output."""
    raw_lines = text.split("\n")
    lines = [ANSI.sub("", line).rstrip("\r") for line in raw_lines]
    offsets, pos = [], 0
    for raw in raw_lines:
        offsets.append(pos)
        pos += len(raw.encode("utf-8", "surrogatepass")) + 1
    kinds = dict.fromkeys(_diagnostics(rule, lines), "diagnostic")
    for lookup in rule.lookup:
        kinds[_hits(lookup, lines, "lookup")[0]] = "lookup"
    needles: dict[str, Needle] = {}
    for i, kind in sorted(kinds.items()):
        text_i = lines[i].strip()
        if text_i and text_i not in needles:
            needles[text_i] = Needle(text_i, kind, i + 1, offsets[i])
    return list(needles.values())
