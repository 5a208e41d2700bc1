"""Recognizers: which tool's diagnostic a key line is, and facts about an output (S1.6).

The rules are data (`specs/recognizers/*.toml`); a policy takes the packaged
ones, a project's files (a rule with a packaged rule's id replaces it in
place; new ones are tried first) and drops the disabled ids. A line's
recognition is the first rule in that order whose pattern matches it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache, lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from .key_line_groups import GroupTally
from .key_line_match import RuleMatcher, rule_problems

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from spillvault.specs.recognizer_rules import RecognizerRule

MAX_RULES: Final = 512


@dataclass(frozen=True)
class Recognition:
    """The rule a line matched, and what kind of line that makes it."""

    rule: str
    kind: str


@dataclass(frozen=True)
class OutputFacts:
    """Facts about a whole output, from its recognized lines.

    `kinds`: how many lines each kind of rule recognized. `counts`: the
    totals (failed, passed, errors, ...) that the last recognized line whose
    rule has `counts` gave; `counts_rule` is that rule's id.
    """

    kinds: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    counts: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    counts_rule: str | None = None

    def shown(self) -> tuple[tuple[str, int], ...]:
        """Return what a preview's facts line says: the totals, then the kinds.

        A kind is left out when the totals already say it (a summary's
        `failed` says more than the count of `FAILED` lines).
        """
        shown = [(name, count) for name, count in self.counts.items() if count]
        said = {name for name, _ in shown}
        for kind, (label, synonyms) in _SHOWN_KINDS.items():
            count = self.kinds.get(kind, 0)
            if count and not said & synonyms:
                shown.append((label if count > 1 else kind, count))
        return tuple(shown)


# The kinds a facts line counts, as it names more than one, and the totals
# that say the same thing already.
_SHOWN_KINDS: Final = {
    "failure": ("failures", frozenset({"failed", "failures", "failure"})),
    "error": ("errors", frozenset({"errors", "error"})),
    "warning": ("warnings", frozenset({"warnings", "warning"})),
    "panic": ("panics", frozenset({"panics", "panic"})),
}


@cache
def _packaged() -> tuple[RecognizerRule, ...]:
    # Imported here: a policy that never judges a line never reads the rules.
    from spillvault.specs.recognizer_rules import packaged_rules  # noqa: PLC0415

    return packaged_rules()


def _disabled_match(pattern: str, rule_id: str) -> bool:
    """Tell whether a disabled entry (an id, or `family.*`) names a rule."""
    if pattern.endswith(".*"):
        return rule_id.startswith(pattern[:-1])
    return rule_id == pattern


def select_rules(
    own: tuple[RecognizerRule, ...], disabled: Iterable[str], problems: list[str]
) -> tuple[RecognizerRule, ...]:
    """Merge a project's rules over the packaged ones and drop disabled ids."""
    replaced = {rule.id: rule for rule in own}
    packaged = _packaged()
    known = {rule.id for rule in packaged}
    added = tuple(rule for rule in own if rule.id not in known)
    merged = added + tuple(replaced.get(rule.id, rule) for rule in packaged)
    problems.extend(
        f"disabled_recognizers: no rule {entry!r}"
        for entry in disabled
        if not any(_disabled_match(entry, rule.id) for rule in merged)
    )
    return tuple(
        rule
        for rule in merged
        if not any(_disabled_match(entry, rule.id) for entry in disabled)
    )


class Recognizers:
    """A policy's rules, compiled: recognize a line, and read its counts."""

    def __init__(
        self, rules: tuple[RecognizerRule, ...], problems: list[str], *, check: bool
    ) -> None:
        self.rules = rules
        self.specs = tuple((rule.pattern, rule.caseless) for rule in rules)
        if len(rules) > MAX_RULES:
            problems.append(f"recognizers: {len(rules)} rules, at most {MAX_RULES}")
            self.rules, self.specs = (), ()
        elif check:
            names = [f"recognizer {rule.id!r}" for rule in rules]
            found = rule_problems(self.specs, names)
            problems += found
            if found:
                self.rules, self.specs = (), ()
        self._matcher = RuleMatcher(self.specs)
        self._recognitions = tuple(
            Recognition(rule.id, rule.kind) for rule in self.rules
        )
        self._index = {rule.id: index for index, rule in enumerate(self.rules)}
        self._counts = tuple(
            None if rule.counts is None else re.compile(rule.counts)
            for rule in self.rules
        )

    def __bool__(self) -> bool:
        return bool(self.rules)

    def index(self, line: str) -> int | None:
        """Return the index of the rule that recognizes `line`, if any."""
        return self._matcher.first(line)

    def recognition(self, index: int) -> Recognition:
        """Return what rule `index` makes a line."""
        return self._recognitions[index]

    def counts(self, rule: str, line: str) -> dict[str, int] | None:
        """Return the totals the rule's `counts` reads in `line`, if any."""
        pattern = self._counts[self._index[rule]]
        if pattern is None:
            return None
        totals: Counter[str] = Counter()
        for match in pattern.finditer(line):
            for name, value in match.groupdict().items():
                if value is not None and value.isdigit():
                    totals[name] += int(value)
        return dict(totals) if totals else None

    def __copy__(self) -> Recognizers:
        return self  # immutable once built

    def __deepcopy__(self, _memo: object) -> Recognizers:
        return self


@lru_cache(maxsize=32)
def build_recognizers(
    own: tuple[RecognizerRule, ...], disabled: frozenset[str]
) -> tuple[Recognizers, tuple[str, ...]]:
    """Return a policy's compiled rules and the problems found building them."""
    problems: list[str] = []
    rules = select_rules(own, sorted(disabled), problems)
    # Only a project's own rules can fail to compile; the packaged ones are
    # compiled on the first line judged, so a short output never pays for it.
    recognizers = Recognizers(rules, problems, check=bool(own))
    return recognizers, tuple(problems)


class FactTally:
    """Count recognized lines per kind and keep the last counts, line by line."""

    def __init__(self, recognizers: Recognizers, max_groups: int = 0) -> None:
        self._recognizers = recognizers
        self._kinds: Counter[str] = Counter()
        self._counts: dict[str, int] | None = None
        self._counts_rule: str | None = None
        self.groups = GroupTally(max_groups)

    def add(
        self, recognition: Recognition, line: str, number: Callable[[], int]
    ) -> None:
        """Record that a rule recognized `line`, number `number()` (lines in order)."""
        self._kinds[recognition.kind] += 1
        counts = self._recognizers.counts(recognition.rule, line)
        if counts is not None:
            self._counts, self._counts_rule = counts, recognition.rule
        if recognition.kind == "location":
            self.groups.attach(line, number, recognition)
        else:
            self.groups.add(line, number, recognition)

    def copy(self) -> FactTally:
        """Return an independent copy."""
        clone = FactTally(self._recognizers)
        clone._kinds = self._kinds.copy()
        clone._counts, clone._counts_rule = self._counts, self._counts_rule
        clone.groups = self.groups.copy()
        return clone

    def facts(self) -> OutputFacts:
        """Return the facts so far."""
        return OutputFacts(
            kinds=MappingProxyType(dict(sorted(self._kinds.items()))),
            counts=MappingProxyType(dict(self._counts or {})),
            counts_rule=self._counts_rule,
        )
