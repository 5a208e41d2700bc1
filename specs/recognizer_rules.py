r"""Recognizer rules as data: per-tool diagnostics, each with examples and fixtures.

A rule file is TOML: a `family` name, `[[rules]]` and `[[fixtures]]`.

    family = "pytest"

    [[rules]]
    id = "pytest.summary"          # <family>.<name>, unique across all files
    kind = "summary"               # one of RULE_KINDS
    pattern = '^=+ \d+ failed'     # Hyperscan's dialect, searched in one line
    caseless = false               # optional, false by default
    counts = '(?P<failed>\d+) failed|(?P<passed>\d+) passed'  # optional
    examples = ["=== 1 failed in 0.1s ==="]                       # must match
    counter_examples = ["1 failed"]                               # must not

    [[fixtures]]
    file = "pytest/run.txt"        # relative to fixtures/ beside the rule file
    expect = { "pytest.summary" = [12] }   # line numbers each rule must win

`counts` is a Python regex of named groups of digits, applied to a matched
line only (every match of it, each group summed). Loading checks the shape of
the data; whether patterns compile and examples match is for the domain's
compiler and `spillvault rules check`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

RULE_KINDS: Final = (
    "error",
    "warning",
    "failure",
    "summary",
    "traceback",
    "exception",
    "panic",
    "location",
)
"""What a recognized line is; `location` points at the code an error names."""

# Most specific first: a line two families match is the earlier family's.
PACKAGED_FAMILIES: Final = (
    "pytest",
    "unittest",
    "tap",
    "typecheck",
    "lint",
    "tsc",
    "packages",
    "make",
    "go",
    "rust",
    "compilers",
    "tracebacks",
)
MAX_COUNTS_CHARS: Final = 400
_ID: Final = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+\Z")
_FAMILY: Final = re.compile(r"[a-z][a-z0-9_]*\Z")
_GROUP: Final = re.compile(r"[a-z][a-z0-9_]*\Z")
_FILE_KEYS: Final = frozenset({"family", "rules", "fixtures"})
_RULE_KEYS: Final = frozenset(
    {"id", "kind", "pattern", "caseless", "counts", "examples", "counter_examples"}
)
_FIXTURE_KEYS: Final = frozenset({"file", "expect"})


class RecognizerRuleError(ValueError):
    """A recognizer rule file is malformed; the message names the culprit."""


@dataclass(frozen=True)
class RecognizerRule:
    """One tool diagnostic: what it is, how to find it, lines it must (not) match."""

    id: str
    kind: str
    pattern: str
    caseless: bool = False
    counts: str | None = None
    examples: tuple[str, ...] = ()
    counter_examples: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The family the id names (the part before its first dot)."""
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class RuleFixture:
    """A tool's real output and the lines each rule must win in it."""

    name: str
    text: str
    expect: Mapping[str, tuple[int, ...]] = field(hash=False)


@dataclass(frozen=True)
class RuleFile:
    """The rules and fixtures of one file, in the file's order."""

    origin: str
    family: str
    rules: tuple[RecognizerRule, ...]
    fixtures: tuple[RuleFixture, ...]


def load_packaged_rules(*, fixtures: bool = True) -> tuple[RuleFile, ...]:
    """Load every rule file shipped in this package, in precedence order."""
    folder = resources.files(__package__).joinpath("recognizers")

    def read(name: str) -> str:
        return folder.joinpath("fixtures", *name.split("/")).read_text("utf-8")

    return tuple(
        load_rules_text(
            folder.joinpath(f"{family}.toml").read_text("utf-8"),
            origin=f"recognizers/{family}.toml",
            read_fixture=read if fixtures else None,
        )
        for family in PACKAGED_FAMILIES
    )


def packaged_rules() -> tuple[RecognizerRule, ...]:
    """Return the packaged rules, in precedence order."""
    files = load_packaged_rules(fixtures=False)
    return tuple(rule for file in files for rule in file.rules)


def load_rules_text(
    text: str, *, origin: str, read_fixture: Callable[[str], str] | None = None
) -> RuleFile:
    """Parse one rule file; `read_fixture(name)` returns a fixture's text.

    Without `read_fixture` the fixtures are checked but not read (text "").
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        msg = f"{origin}: invalid TOML: {error}"
        raise RecognizerRuleError(msg) from error
    return parse_rules(data, origin=origin, read_fixture=read_fixture)


def parse_rules(
    data: Mapping[str, Any],
    *,
    origin: str,
    read_fixture: Callable[[str], str] | None = None,
) -> RuleFile:
    """Validate a rule file's data; `RecognizerRuleError` names what is wrong."""
    check = _Checker(origin)
    unknown = sorted(set(data) - _FILE_KEYS)
    if unknown:
        raise check.fail(f"unknown key {unknown[0]!r}")
    family = data.get("family")
    if not isinstance(family, str) or not _FAMILY.match(family):
        raise check.fail(f"'family' must be a lower-case name, not {family!r}")
    raw_rules = data.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise check.fail("'rules' must be a non-empty list of tables")
    rules = tuple(check.rule(n, entry) for n, entry in enumerate(raw_rules, 1))
    ids = [rule.id for rule in rules]
    for rule in rules:
        if ids.count(rule.id) > 1:
            raise check.fail(f"duplicate rule id {rule.id!r}")
    fixtures = tuple(
        check.fixture(n, entry, set(ids), read_fixture)
        for n, entry in enumerate(data.get("fixtures", []), 1)
    )
    shown = {rule_id for fixture in fixtures for rule_id in fixture.expect}
    for rule in rules:
        if rule.id not in shown:
            raise check.fail(f"rule {rule.id!r} has no fixture line")
    return RuleFile(origin, family, rules, fixtures)


class _Checker:
    """Checks one file; every message starts with the file's origin."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, message: str) -> RecognizerRuleError:
        return RecognizerRuleError(f"{self.origin}: {message}")

    def rule(self, number: int, entry: object) -> RecognizerRule:
        where = f"rule {number}"
        if not isinstance(entry, dict):
            raise self.fail(f"{where}: must be a table")
        unknown = sorted(set(entry) - _RULE_KEYS)
        if unknown:
            raise self.fail(f"{where}: unknown key {unknown[0]!r}")
        rule_id = entry.get("id")
        if not isinstance(rule_id, str) or not _ID.match(rule_id):
            raise self.fail(
                f"{where}: 'id' must be like 'family.name', not {rule_id!r}"
            )
        where = f"rule {rule_id!r}"
        kind = entry.get("kind")
        if kind not in RULE_KINDS:
            raise self.fail(f"{where}: 'kind' must be one of {list(RULE_KINDS)}")
        pattern = entry.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise self.fail(f"{where}: 'pattern' must be a non-empty string")
        caseless = entry.get("caseless", False)
        if not isinstance(caseless, bool):
            raise self.fail(f"{where}: 'caseless' must be true or false")
        counts = entry.get("counts")
        if counts is not None:
            self.counts(where, counts)
        return RecognizerRule(
            id=rule_id,
            kind=str(kind),
            pattern=pattern,
            caseless=caseless,
            counts=counts,
            examples=self.lines(where, entry, "examples", required=True),
            counter_examples=self.lines(where, entry, "counter_examples"),
        )

    def counts(self, where: str, counts: object) -> None:
        if not isinstance(counts, str) or not counts:
            raise self.fail(f"{where}: 'counts' must be a non-empty string")
        if len(counts) > MAX_COUNTS_CHARS:
            raise self.fail(f"{where}: 'counts' is over {MAX_COUNTS_CHARS} characters")
        try:
            compiled = re.compile(counts)
        except re.error as error:
            raise self.fail(f"{where}: 'counts' is no Python regex: {error}") from None
        names = set(compiled.groupindex)
        if not names or len(names) != compiled.groups:
            raise self.fail(f"{where}: every group of 'counts' must be named")
        for name in sorted(names):
            if not _GROUP.match(name):
                raise self.fail(f"{where}: 'counts' group {name!r} is not lower-case")

    def lines(
        self, where: str, entry: Mapping[str, Any], key: str, *, required: bool = False
    ) -> tuple[str, ...]:
        value = entry.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{where}: {key!r} must be a list of strings")
        if required and not value:
            raise self.fail(f"{where}: {key!r} must not be empty")
        for line in value:
            if "\n" in line or "\r" in line:
                raise self.fail(f"{where}: {key!r} holds a line break: {line!r}")
        return tuple(value)

    def fixture(
        self,
        number: int,
        entry: object,
        ids: set[str],
        read_fixture: Callable[[str], str] | None,
    ) -> RuleFixture:
        where = f"fixture {number}"
        if not isinstance(entry, dict):
            raise self.fail(f"{where}: must be a table")
        unknown = sorted(set(entry) - _FIXTURE_KEYS)
        if unknown:
            raise self.fail(f"{where}: unknown key {unknown[0]!r}")
        name = entry.get("file")
        if not isinstance(name, str) or not name or name.startswith("/"):
            raise self.fail(f"{where}: 'file' must be a relative path")
        if ".." in name.split("/"):
            raise self.fail(f"{where}: 'file' must stay under fixtures/: {name!r}")
        lines = self.expect(f"{where} ({name})", entry.get("expect"), ids)
        if read_fixture is None:
            return RuleFixture(name, "", lines)
        try:
            text = read_fixture(name)
        except (OSError, UnicodeDecodeError) as error:
            raise self.fail(f"{where}: cannot read {name!r}: {error}") from None
        return RuleFixture(name, text, lines)

    def expect(
        self, where: str, expect: object, ids: set[str]
    ) -> dict[str, tuple[int, ...]]:
        if not isinstance(expect, dict):
            raise self.fail(f"{where}: 'expect' must be a table")
        lines: dict[str, tuple[int, ...]] = {}
        for rule_id, numbers in expect.items():
            if rule_id not in ids:
                raise self.fail(f"{where}: unknown rule {rule_id!r}")
            if not isinstance(numbers, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0
                for n in numbers
            ):
                msg = f"{where}: {rule_id!r} must list line numbers (>= 1)"
                raise self.fail(msg)
            lines[rule_id] = tuple(numbers)
        return lines
