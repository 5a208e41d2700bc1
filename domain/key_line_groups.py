"""Which key lines a preview shows: repeats collapsed, the ends kept (S1.6).

Candidates that say the same thing in different places (`E501 Line too long`
on five hundred lines, one `Incompatible return value type` per function) form
a group: the same first plain words once locations, numbers, paths and quoted
names are set aside. A group of more than a few lines in the whole output (and,
when the slots run short, the largest of the rest) shows only its first line
and one note, `[... N more like line L: grep_artifact(...)]`, whose literal
pattern every member of the group holds, so the agent can list them all.
What still does not fit is dropped from the middle out, the lowest rank first:
the earliest and the latest candidates are the ones an agent acts on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

KeyLine = tuple[int, str]
"""(1-based line number, the line's text), as `key_lines.KeyLine`."""

KEEP_PER_GROUP: Final = 1
"""Lines a collapsed group shows before its note, at the least."""
FEW: Final = 3
"""A group of more lines than this is a repeat: it always collapses, to its
first `KEEP_PER_GROUP` lines, or up to this many when the block has room."""
KEY_WORDS: Final = 4
"""Plain words that name a group."""
PATTERN_CHARS: Final = 60
"""The longest literal a note suggests to grep for."""
_PLAIN: Final = re.compile(r"[A-Za-z][A-Za-z'_-]*")
_EDGE_PUNCTUATION: Final = "\"'`()[]{}<>,;:!?*"
_DIGITS: Final = re.compile(r"\d+")
_QUOTES: Final = "\"'`\u2018\u201c"


@dataclass(frozen=True)
class Collapsed:
    """A note for the members of a group that are not shown.

    `at_least`: the candidates were capped, so there may be more than `more`.
    """

    like_line: int
    more: int
    pattern: str
    at_least: bool = False


def group_key(text: str) -> str:
    """Return what a line says, without where: its first plain words, lower-cased."""
    words = []
    for token in text.split():
        if token[0] in _QUOTES:
            continue  # a quoted name: what the line is about, not what it says
        word = token.strip(_EDGE_PUNCTUATION)
        if _PLAIN.fullmatch(word):
            words.append(word.lower())
            if len(words) == KEY_WORDS:
                break
    if len(words) >= 2:
        return " ".join(words)
    return _DIGITS.sub("0", text.strip())


def common_literal(texts: Sequence[str]) -> str:
    """Return a literal every text holds ("" if none of 3+ characters is found).

    The longest run of whole words of the first text, from one of its plain
    words on, that every other text holds, at most `PATTERN_CHARS` long.
    """
    first, best = texts[0], ""
    for word in _PLAIN.finditer(first):
        start = word.start()
        end = start
        while end < len(first) and end - start < PATTERN_CHARS:
            space = first.find(" ", end + 1)
            end = len(first) if space < 0 else space
            candidate = first[start : min(end, start + PATTERN_CHARS)].rstrip()
            if not all(candidate in text for text in texts[1:]):
                break
            if len(candidate) > len(best):
                best = candidate
        if len(best) >= PATTERN_CHARS:
            break
    return best if len(best) >= 3 else ""


PER_END_CAP: Final = 20
"""The most candidates kept at each end of an output, however many may show:
past a few dozen the group tallies (below) bring what the ends do not."""


def kept_per_end(max_key_lines: int) -> int:
    """Return how many of the first and of the last candidates a scan keeps."""
    return min(2 * max_key_lines, PER_END_CAP)


def max_groups(max_key_lines: int) -> int:
    """Return how many groups a tally tracks for a policy's `max_key_lines`."""
    return 0 if max_key_lines == 0 else max(256, 4 * max_key_lines)


MEMBERS_KEPT: Final = FEW
"""Lines of each group a tally keeps: the most a collapsed group shows."""


class GroupTally:
    """Count the recognized lines of each group over a whole output; keep the first.

    A sea of one diagnostic (1,500 `missing a type annotation`) fills the
    first and the last candidates an output keeps; the tally keeps the first
    lines of every other group as well, so a lone `Name "x" is not defined`
    in the middle still reaches the preview, and a note can say how many
    lines a collapsed group has. At most `max_groups` groups are tracked
    (memory stays bounded); lines of later groups are counted as `untracked`.
    A line's number is asked for (`number()`) only when the line is kept.
    """

    def __init__(self, max_groups: int) -> None:
        self._max_groups = max_groups
        self._counts: dict[str, int] = {}
        self._members: dict[str, list[tuple[int, str, object]]] = {}
        self._last_kept: int | None = None  # the number of the line kept last
        self._attached: list[tuple[int, str, object]] = []
        self.untracked = 0

    def attach(self, text: str, number: Callable[[], int], tag: object = None) -> None:
        """Keep a line that belongs to the line before it (a diagnostic's location)."""
        last = self._last_kept
        if last is not None and number() == last + 1:
            self._attached.append((last + 1, text, tag))
        self._last_kept = None

    def add(self, text: str, number: Callable[[], int], tag: object = None) -> None:
        """Count one line, keeping it (with `tag`) if it is among its group's first."""
        key = group_key(text)
        members = self._members.get(key)
        if members is None:
            if len(self._members) >= self._max_groups:
                self.untracked += 1
                return
            members = self._members[key] = []
        self._counts[key] = self._counts.get(key, 0) + 1
        self._last_kept = None
        if len(members) < MEMBERS_KEPT:
            members.append((number(), text, tag))
            self._last_kept = members[-1][0]

    def members(self) -> list[tuple[int, str, object]]:
        """Return the kept lines of every group and their attached lines."""
        kept = [line for lines in self._members.values() for line in lines]
        return kept + self._attached

    def counts(self) -> dict[str, int]:
        """Return how many lines each tracked group has."""
        return dict(self._counts)

    def copy(self) -> GroupTally:
        """Return an independent copy."""
        clone = GroupTally(self._max_groups)
        clone._counts = dict(self._counts)
        clone._members = {k: list(v) for k, v in self._members.items()}
        clone._last_kept = self._last_kept
        clone._attached = list(self._attached)
        clone.untracked = self.untracked
        return clone


@dataclass
class _Unit:
    """Lines shown together: one key line, or a group's first lines and its note."""

    lines: list[KeyLine]
    note: Collapsed | None
    rank: int
    key: str = ""  # a collapsed group's key
    after: list[KeyLine] = field(default_factory=list)
    spare: list[KeyLine] = field(default_factory=list)  # a collapsed group's next

    @property
    def height(self) -> int:
        return len(self.lines) + len(self.after) + (self.note is not None)

    @property
    def first(self) -> int:
        return self.lines[0][0]


def plan_key_lines(  # noqa: PLR0913 - the plan's inputs, keyword-only past slots
    candidates: Sequence[KeyLine],
    slots: int,
    rank: Callable[[str], int] | None = None,
    *,
    capped: bool = False,
    totals: Mapping[str, int] | None = None,
    attached: Callable[[str], bool] | None = None,
    shown: Callable[[], Collection[str]] | None = None,
) -> list[KeyLine | Collapsed]:
    """Choose at most `slots` block lines (key lines and notes), in line order.

    `totals`: each group's key lines in the whole output (a `GroupTally`), so
    a note says how many more there are; without them a note counts the
    candidates, a lower bound when `capped` (the first and last of more).
    `shown`: gives the groups the preview's head or tail already shows a line
    of (asked only when the block has room to spare); their collapsed notes
    get no more lines than the first.
    """
    if slots <= 0:
        return []
    ordered = sorted(dict(candidates).items())
    # A line `attached` says belongs to the line before it (a location after
    # its diagnostic) goes and stays with that line.
    after: dict[int, KeyLine] = {}
    if attached is not None:
        numbers = {number for number, _ in ordered}
        after = {
            number - 1: (number, text)
            for number, text in ordered
            if number - 1 in numbers and attached(text)
        }
        ordered = [line for line in ordered if line not in after.values()]
    units = _collapse(ordered, slots, rank, capped=capped, totals=totals)
    for unit in units:
        unit.after = [after[n] for n, _ in unit.lines if n in after]
    height = sum(unit.height for unit in units)
    if height < slots and any(unit.spare for unit in units):
        seen = () if shown is None else shown()
        growing = [unit for unit in units if unit.spare and unit.key not in seen]
        _show_more_of_each_group(growing, slots - height, after)
        height = sum(unit.height for unit in units)
    # Drop from the middle out, the lowest rank first, until the block fits;
    # of two as far from the ends, the later goes first (the earlier half wins).
    order = sorted(
        range(len(units)),
        key=lambda i: (units[i].rank, -min(i, len(units) - 1 - i), -i),
    )
    dropped = set()
    for index in order:
        if height <= slots:
            break
        dropped.add(index)
        height -= units[index].height
    # In line order, each note right after the last line of its group.
    placed: list[tuple[int, int, KeyLine | Collapsed]] = []
    for index, unit in enumerate(units):
        if index in dropped:
            continue
        placed += [(line[0], 0, line) for line in unit.lines + unit.after]
        if unit.note is not None:
            placed.append((unit.note.like_line, 1, unit.note))
    placed.sort(key=lambda entry: entry[:2])
    return [entry for _, _, entry in placed]


def _collapse(
    ordered: list[KeyLine],
    slots: int,
    rank: Callable[[str], int] | None,
    *,
    capped: bool,
    totals: Mapping[str, int] | None,
) -> list[_Unit]:
    """Group the candidates; collapse the largest groups until the lines fit."""
    groups: dict[str, list[KeyLine]] = {}
    for line in ordered:
        groups.setdefault(group_key(line[1]), []).append(line)
    shown = {key: len(members) for key, members in groups.items()}
    patterns: dict[str, str] = {}
    height = len(ordered)
    # A repeated diagnostic (more than a few lines in the whole output) always
    # collapses: its first line and a note say all a list of it would.
    for key, members in groups.items():
        total = max(len(members), (totals or {}).get(key, 0))
        if total > FEW and (pattern := common_literal([t for _, t in members])):
            patterns[key] = pattern
            height += KEEP_PER_GROUP + 1 - shown[key]
            shown[key] = KEEP_PER_GROUP
    while height > slots:
        # The largest group that a literal can list whole collapses next.
        open_groups = [k for k in shown if k not in patterns]
        if not open_groups:
            break
        key = max(open_groups, key=lambda k: shown[k])
        if shown[key] <= KEEP_PER_GROUP + 1:
            break  # collapsing saves nothing more
        patterns[key] = common_literal([text for _, text in groups[key]])
        if not patterns[key]:
            continue
        height -= shown[key] - KEEP_PER_GROUP - 1
        shown[key] = KEEP_PER_GROUP
    units: list[_Unit] = []
    for key, members in groups.items():
        score = 0 if rank is None else max(rank(text) for _, text in members)
        if key not in patterns or not patterns[key]:
            units += [_Unit([line], None, score) for line in members]
            continue
        kept = members[:KEEP_PER_GROUP]
        known = totals is not None and key in totals
        total = totals[key] if totals is not None and known else len(members)
        at_least = capped and not known
        note = Collapsed(
            kept[-1][0],
            max(total, len(members)) - len(kept),
            patterns[key],
            at_least=at_least,
        )
        spare = members[KEEP_PER_GROUP:FEW]
        units.append(_Unit(kept, note, score, key=key, spare=spare))
    units.sort(key=lambda unit: unit.first)
    return units


def _show_more_of_each_group(
    units: list[_Unit], room: int, after: Mapping[int, KeyLine]
) -> None:
    """Spend `room` spare block lines on the next lines of `units` (with spares).

    One more line for each group in turn, the highest rank and then the
    earliest first, each with the location attached to it.
    """
    growing = sorted(units, key=lambda u: (-u.rank, u.first))
    while growing:
        for unit in list(growing):
            line = unit.spare[0]
            cost = 1 + (line[0] in after)
            if cost > room:
                return
            room -= cost
            del unit.spare[0]
            unit.lines.append(line)
            if line[0] in after:
                unit.after.append(after[line[0]])
            assert unit.note is not None  # noqa: S101 - only collapsed groups grow
            unit.note = replace(unit.note, like_line=line[0], more=unit.note.more - 1)
            if not unit.spare:
                growing.remove(unit)


__all__ = [
    "KEEP_PER_GROUP",
    "Collapsed",
    "GroupTally",
    "common_literal",
    "group_key",
    "plan_key_lines",
]
