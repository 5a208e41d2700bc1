"""Check recognizer rules against their examples and fixtures (S1.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .key_line_match import SCAN_CHARS, RuleMatcher, rule_problems
from .recognizers import Recognizers
from .terminal import clean_terminal

if TYPE_CHECKING:
    from spillvault.specs.recognizer_rules import RecognizerRule, RuleFile

    from .policy import SpillPolicy


@dataclass(frozen=True)
class RuleCheck:
    """One rule's verdict: no problems means it passed."""

    rule: str
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        """Tell whether the rule did all its examples and fixtures say."""
        return not self.problems


def winners(text: str, policy: SpillPolicy) -> dict[int, str]:
    """Return line number -> id of the rule that recognizes it, as a scan judges."""
    won = {}
    for number, line in enumerate(text.split("\n"), 1):
        recognition = policy.recognize(clean_terminal(line)[: SCAN_CHARS + 1])
        if recognition is not None:
            won[number] = recognition.rule
    return won


def check_rule_file(file: RuleFile, policy: SpillPolicy) -> tuple[RuleCheck, ...]:
    """Check each rule of `file`; fixtures are judged by `policy`'s rules in effect."""
    judged = [winners(fixture.text, policy) for fixture in file.fixtures]
    checks = []
    for rule in file.rules:
        problems = _own_problems(rule)
        for fixture, won in zip(file.fixtures, judged, strict=True):
            got = tuple(n for n, rule_id in sorted(won.items()) if rule_id == rule.id)
            wanted = tuple(sorted(fixture.expect.get(rule.id, ())))
            if got != wanted:
                problems.append(
                    f"fixture {fixture.name}: wins lines {list(got)}, "
                    f"expected {list(wanted)}"
                )
        checks.append(RuleCheck(rule.id, tuple(problems)))
    return tuple(checks)


def _own_problems(rule: RecognizerRule) -> list[str]:
    """Check a rule alone: it compiles, matches its examples, not the others."""
    spec = ((rule.pattern, rule.caseless),)
    problems = rule_problems(spec, ["rule"])
    if problems:
        return problems
    alone = RuleMatcher(spec)
    problems += [
        f"example does not match: {line!r}"
        for line in rule.examples
        if alone.first(line) is None
    ]
    problems += [
        f"counter-example matches: {line!r}"
        for line in rule.counter_examples
        if alone.first(line) is not None
    ]
    if rule.counts is not None:
        reader = Recognizers((rule,), [], check=False)
        if not any(reader.counts(rule.id, line) for line in rule.examples):
            problems.append("counts reads no number in any example")
    return problems
