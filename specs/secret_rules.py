"""Load and validate the secret rules that `specs/secrets.toml` keeps as data."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

_ID: Final = re.compile(r"[a-z][a-z0-9-]{1,40}\Z")
_KEYS: Final = frozenset(
    {
        "id",
        "probe",
        "match",
        "min_entropy",
        "letters_and_digits",
        "allow",
        "closer",
        "examples",
        "counterexamples",
    }
)
_REQUIRED: Final = ("id", "probe", "match")
MAX_ENTROPY: Final = 8.0  # bits per character never exceed log2(256) for bytes


class SecretRuleError(ValueError):
    """The secret rules are malformed; the message names the rule and the key."""


@dataclass(frozen=True)
class SecretRule:
    """One kind of credential: how to find it, confirm it, and what it looks like."""

    id: str
    probe: str
    match: str
    min_entropy: float | None = None
    letters_and_digits: bool = False
    allow: str | None = None
    closer: str | None = None
    examples: tuple[str, ...] = ()
    counterexamples: tuple[str, ...] = ()


def load_secret_rules() -> tuple[SecretRule, ...]:
    """Load the packaged rules (`specs/secrets.toml`), validated."""
    text = resources.files(__package__).joinpath("secrets.toml").read_text("utf-8")
    return parse_secret_rules(text)


def parse_secret_rules(text: str) -> tuple[SecretRule, ...]:
    """Parse and validate rules from TOML text; SecretRuleError names each fault."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        msg = f"secret rules are not valid TOML: {error}"
        raise SecretRuleError(msg) from error
    unknown = sorted(set(data) - {"rules"})
    if unknown:
        msg = f"secret rules: unknown top-level key(s) {', '.join(unknown)}"
        raise SecretRuleError(msg)
    raw = data.get("rules")
    if not isinstance(raw, list) or not raw:
        msg = "secret rules: [[rules]] must hold at least one rule"
        raise SecretRuleError(msg)
    problems: list[str] = []
    rules: list[SecretRule] = []
    for index, table in enumerate(raw):
        rule = _rule(index, table, problems)
        if rule is not None:
            rules.append(rule)
    ids = [rule.id for rule in rules]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    problems += [f"rule id {i!r} appears twice" for i in twice]
    if problems:
        raise SecretRuleError("invalid secret rules: " + "; ".join(problems))
    return tuple(rules)


def _rule(index: int, table: object, problems: list[str]) -> SecretRule | None:
    """Return one validated rule, or None after naming its problems."""
    if not isinstance(table, dict):
        problems.append(f"rules[{index}] must be a table")
        return None
    name = f"rules[{index}]" if not isinstance(table.get("id"), str) else table["id"]
    found = len(problems)
    problems += [f"{name}: unknown key {key!r}" for key in sorted(set(table) - _KEYS)]
    problems += [f"{name}: {key} is required" for key in _REQUIRED if key not in table]
    if isinstance(table.get("id"), str) and not _ID.match(table["id"]):
        problems.append(f"{name}: id must be lower-case words joined by '-'")
    for key in ("id", "probe", "match", "allow", "closer"):
        if key in table and not (isinstance(table[key], str) and table[key]):
            problems.append(f"{name}: {key} must be a non-empty string")
    for key in ("match", "allow"):
        _check_regex(name, key, table.get(key), problems)
    _check_entropy(name, table.get("min_entropy"), problems)
    if not isinstance(table.get("letters_and_digits", False), bool):
        problems.append(f"{name}: letters_and_digits must be true or false")
    for key in ("examples", "counterexamples"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            problems.append(f"{name}: {key} must be a list of strings")
    if len(problems) > found:
        return None
    return _built(table)


def _built(table: dict[str, Any]) -> SecretRule:
    entropy = table.get("min_entropy")
    return SecretRule(
        id=table["id"],
        probe=table["probe"],
        match=table["match"],
        min_entropy=None if entropy is None else float(entropy),
        letters_and_digits=table.get("letters_and_digits", False),
        allow=table.get("allow"),
        closer=table.get("closer"),
        examples=tuple(table.get("examples", ())),
        counterexamples=tuple(table.get("counterexamples", ())),
    )


def _check_regex(name: str, key: str, value: object, problems: list[str]) -> None:
    if not isinstance(value, str):
        return
    try:
        re.compile(value)
    except re.error as error:
        problems.append(f"{name}: {key} is not a valid regex ({error})")


def _check_entropy(name: str, value: object, problems: list[str]) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(f"{name}: min_entropy must be a number")
    elif not 0 < value <= MAX_ENTROPY:
        problems.append(f"{name}: min_entropy must be in (0, {MAX_ENTROPY}]")


__all__ = [
    "SecretRule",
    "SecretRuleError",
    "load_secret_rules",
    "parse_secret_rules",
]
