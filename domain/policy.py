"""Spill policy: per-tool limits in explicit units, preview shape, key lines (S1.3)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from .bounds import MAX_SIZE, integer_problem, number_problem, shown
from .constants import BASH_MAX_OUTPUT_LENGTH, TOOL_RESULT_THRESHOLD_KB
from .enums import SizeUnit
from .errors import SpillPolicyError
from .key_line_match import SCAN_CHARS, KeyLineMatcher, compile_key_line_patterns
from .notice import worst_fixed_size
from .recognizers import Recognition, Recognizers, build_recognizers

if TYPE_CHECKING:
    from spillvault.specs.recognizer_rules import RecognizerRule

TokenCounter = Callable[[str], int]
RuleLoader = Callable[[str], "tuple[RecognizerRule, ...]"]
"""Reads a policy's `recognizers` entry (a rule file's path) into its rules."""

# The mapping / TOML schema, with the defaults; a test reads it back. Every key
# is optional; unknown keys are errors at any level; [tools] merges over the
# built-in tools; each limit table needs `limit` and `unit`, `preview_budget`
# (<= limit) defaults to the limit. Handle and hint lengths are as rendered, in
# UTF-8 bytes. TOML wants the top-level keys before the tables. Key-line
# patterns are Hyperscan's (PCRE without backreferences, lookarounds, atomic
# groups or possessive quantifiers), caseless, searched anywhere in a line;
# `\w`, `\d`, `\s` and `\b` are ASCII in them, except in the built-in ones.
EXAMPLE_TOML: Final = """\
head_ratio = 1
tail_ratio = 4
exempt_tools = ["grep_artifact", "read", "read_artifact", "read_file"]
key_line_patterns = [
  '(?:^|[^\\w/-])\\w*error(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])fail(?:ed|ure|ures|ing|s)?(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])\\w*exception(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])traceback(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])panic(?:ked)?(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])fatal(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])assert\\w*(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])(?:segmentation fault|core dumped)(?:$|[^\\w./-]|[./-](?:$|\\W))',
  '(?:^|[^\\w/-])abort(?:ed)?(?:$|[^\\w./-]|[./-](?:$|\\W))',
]
max_key_lines = 40
max_handle_length = 256
max_hint_length = 320
redact_secrets = true

[default]
limit = 51200
unit = "bytes"

[tools.bash]
limit = 30000
unit = "chars"
preview_budget = 30000
"""


# Four disjoint classes (ASCII letters, ASCII digits, whitespace, anything else),
# each run cut into chunks from its start: a prefix or suffix only shortens the
# first or last run, so it never counts more than the whole.
_TOKEN: Final = re.compile(r"[A-Za-z]{1,8}|[0-9]{1,3}|\s{1,4}|[^A-Za-z0-9\s]")
# A whitespace run whose last chunk is a lone space: BPE glues that space to the
# next word, so it is not counted (still monotone: the run's count never drops).
_LONE_SPACE: Final = re.compile(r"(?<!\s)(?:\s{4})* (?!\s)")


def default_token_counter(text: str) -> int:
    """Approximate a BPE token count with a regex pre-tokenizer; no download."""
    # Approximation: ASCII words count one token per 8 letters, numbers one per 3
    # digits, whitespace one per 4 characters (a lone space is free), and every
    # other code point (punctuation, CJK, emoji, combining marks) one token.
    # English prose comes out ~1.2x a real tokenizer, CJK ~0.7-1x, emoji low.
    # `subn` counts without building a list, so memory stays flat on huge inputs.
    return _TOKEN.subn("", text)[1] - _LONE_SPACE.subn("", text)[1]


@dataclass(frozen=True)
class ToolLimit:
    """A tool's spill limit and preview budget, both in one explicit unit."""

    limit: int
    unit: SizeUnit
    preview_budget: int | None = None

    def __post_init__(self) -> None:
        """Coerce the unit and reject values no configuration could mean."""
        if isinstance(self.unit, str) and self.unit in _UNITS:
            object.__setattr__(self, "unit", SizeUnit(self.unit))
        problems = _tool_limit_problems("ToolLimit", self)
        if problems:
            raise SpillPolicyError("invalid spill policy: " + "; ".join(problems))
        if self.preview_budget == self.limit:
            # The same budget either way; one spelling keeps equality honest.
            object.__setattr__(self, "preview_budget", None)

    @property
    def budget(self) -> int:
        """The replacement's size bound: the preview budget, else the limit."""
        return self.limit if self.preview_budget is None else self.preview_budget


_UNITS: Final = frozenset(unit.value for unit in SizeUnit)

_TOP_KEYS: Final = frozenset(
    {
        "default",
        "tools",
        "head_ratio",
        "tail_ratio",
        "exempt_tools",
        "key_line_patterns",
        "max_key_lines",
        "max_handle_length",
        "max_hint_length",
        "redact_secrets",
        "recognizers",
        "disabled_recognizers",
    }
)
_LIMIT_KEYS: Final = frozenset({"limit", "unit", "preview_budget"})
MAX_RATIO: Final = 1_000_000  # head and tail shares stay far from overflow
MAX_KEY_LINES: Final = 1000  # 4 x this many scanned lines are kept in memory
MAX_RENDERED_LENGTH: Final = 65536  # a handle or hint, in UTF-8 bytes


def _integer_check(low: int, high: int) -> Callable[[str, object], list[str]]:
    """Return a check naming its key unless the value is an integer in [low, high]."""

    def check(key: str, value: object) -> list[str]:
        problem = integer_problem(key, value, low, high)
        return [] if problem is None else [problem]

    return check


_positive_int_problem: Final = _integer_check(1, MAX_SIZE)


def _tool_limit_problems(key: str, limit: object) -> list[str]:
    """Problems of one ToolLimit-like object, each naming `key`'s field."""
    if not isinstance(limit, ToolLimit):
        return [f"{key} must be a ToolLimit, not {type(limit).__name__}"]
    problems = _positive_int_problem(f"{key}.limit", limit.limit)
    if not (isinstance(limit.unit, str) and limit.unit in _UNITS):
        problems.append(
            f"{key}.unit must be one of {sorted(_UNITS)}, not {shown(limit.unit)}"
        )
    if limit.preview_budget is not None:
        budget_problems = _positive_int_problem(
            f"{key}.preview_budget", limit.preview_budget
        )
        problems += budget_problems
        if not budget_problems and not problems and limit.preview_budget > limit.limit:
            # A replacement larger than the limit would be bigger than what passes.
            problems.append(
                f"{key}.preview_budget {limit.preview_budget} must not exceed "
                f"{key}.limit {limit.limit}"
            )
    return problems


def _boolean_problem(key: str, value: object) -> list[str]:
    """Name `key` unless `value` is true or false."""
    return (
        []
        if isinstance(value, bool)
        else [f"{key} must be true or false, not {shown(value)}"]
    )


def _ratio_problem(key: str, value: object) -> list[str]:
    """Name `key` unless `value` is a finite number in (0, MAX_RATIO]."""
    problem = number_problem(key, value, 0, MAX_RATIO, above_low=True)
    return [] if problem is None else [problem]


_SCALAR_CHECKS: Final[Mapping[str, Callable[[str, object], list[str]]]] = {
    "head_ratio": _ratio_problem,
    "tail_ratio": _ratio_problem,
    "max_key_lines": _integer_check(0, MAX_KEY_LINES),
    "max_handle_length": _integer_check(1, MAX_RENDERED_LENGTH),
    "max_hint_length": _integer_check(1, MAX_RENDERED_LENGTH),
    "redact_secrets": _boolean_problem,
}


DEFAULT_LIMIT: Final = ToolLimit(TOOL_RESULT_THRESHOLD_KB * 1024, SizeUnit.BYTES)
DEFAULT_TOOL_LIMITS: Final[Mapping[str, ToolLimit]] = MappingProxyType(
    {"bash": ToolLimit(BASH_MAX_OUTPUT_LENGTH, SizeUnit.CHARS)}
)
DEFAULT_EXEMPT_TOOLS: Final = frozenset(
    {"read", "read_file", "read_artifact", "grep_artifact"}
)
# A key word is a whole word, not part of an identifier joined by "-" or "/"
# before it or by "-", "." or "/" after it: `liberror-perl` (a package) and
# `lib/traceback.py` (a path) say nothing went wrong; `java.lang.Error`,
# `error.` and `fail...` still do.
_WORD_START: Final = r"(?:^|[^\w/-])"
_WORD_END: Final = r"(?:$|[^\w./-]|[./-](?:$|\W))"
DEFAULT_KEY_LINE_PATTERNS: Final = tuple(
    _WORD_START + word + _WORD_END
    for word in (
        r"\w*error",
        r"fail(?:ed|ure|ures|ing|s)?",
        r"\w*exception",
        r"traceback",
        r"panic(?:ked)?",
        r"fatal",
        r"assert\w*",
        r"(?:segmentation fault|core dumped)",
        r"abort(?:ed)?",
    )
)
# Matched with Python's Unicode word boundaries wherever they appear: each reads
# only ASCII letters and punctuation, spaces, \w and \W, ^ and $ (what
# key_line_match's ASCII stand-in keeps exact).
_BUILT_IN_PATTERNS: Final = frozenset(DEFAULT_KEY_LINE_PATTERNS)
# Every built-in pattern needs one of these words (case-insensitively), so a
# plain literal search on case-folded text can skip lines none of them matches
# (Python's re is ~60 ns a character with IGNORECASE; this is ~1 ns).
SCREEN_WORDS: Final = (
    "error",
    "fail",
    "exception",
    "traceback",
    "panic",
    "fatal",
    "assert",
    "segmentation fault",
    "core dumped",
    "abort",
)
_SCREEN: Final = re.compile("|".join(re.escape(word) for word in SCREEN_WORDS))


def fold_case(text: str) -> str:
    """Lower-case text the way re.IGNORECASE compares ASCII letters."""
    # str.lower() leaves these alone (or expands İ), yet IGNORECASE equates them
    # with i and s; every other character that matches a letter of SCREEN_WORDS
    # under IGNORECASE lower-cases to it (a test checks all of Unicode).
    return (
        text.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s")
    ).lower()


# A placeholder tool name for checking the default limit at load time: the real
# name is checked per call (S1.2 rule 4); 64 is the providers' tool-name maximum.
DEFAULT_TOOL_PLACEHOLDER: Final = "x" * 64


@dataclass(frozen=True)
class SpillPolicy:
    """When to spill which tool's output, and how its preview is shaped (S1.3)."""

    default_limit: ToolLimit = DEFAULT_LIMIT
    tool_limits: Mapping[str, ToolLimit] = field(
        default_factory=lambda: DEFAULT_TOOL_LIMITS, hash=False
    )
    head_ratio: float = 1
    tail_ratio: float = 4
    exempt_tools: frozenset[str] = DEFAULT_EXEMPT_TOOLS
    key_line_patterns: tuple[str, ...] = DEFAULT_KEY_LINE_PATTERNS
    max_key_lines: int = 40
    max_handle_length: int = 256
    token_counter: TokenCounter = default_token_counter
    max_hint_length: int = 320
    # Mask credentials in what the model sees (previews, page-fault reads).
    redact_secrets: bool = True
    # A project's recognizer rules (tried before the packaged ones, replacing
    # one with the same id) and the ids (or `family.*`) switched off.
    recognizer_rules: tuple[RecognizerRule, ...] = ()
    disabled_recognizers: frozenset[str] = frozenset()
    _matcher: KeyLineMatcher = field(init=False, repr=False, compare=False, hash=False)
    _recognizers: Recognizers | None = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        """Freeze the collections, compile patterns once, validate everything."""
        problems: list[str] = []
        limits = self.tool_limits
        if isinstance(limits, Mapping):
            # An entry equal to the default changes nothing; dropping it makes
            # equality (and the TOML round trip) about behaviour, not spelling.
            own = {k: v for k, v in limits.items() if v != self.default_limit}
            object.__setattr__(self, "tool_limits", MappingProxyType(own))
        else:
            problems.append("tools must be a mapping of tool name to ToolLimit")
            object.__setattr__(self, "tool_limits", MappingProxyType({}))
        exempt = _as_tuple("exempt_tools", self.exempt_tools, problems)
        problems += _string_problems("exempt_tools", exempt)
        strings = frozenset(tool for tool in exempt if isinstance(tool, str))
        object.__setattr__(self, "exempt_tools", strings)
        patterns = _as_tuple("key_line_patterns", self.key_line_patterns, problems)
        object.__setattr__(self, "key_line_patterns", patterns)
        matcher = compile_key_line_patterns(
            patterns, problems, built_in=_BUILT_IN_PATTERNS
        )
        object.__setattr__(self, "_matcher", matcher)
        problems += self._build_recognizers()
        problems += self._value_problems()
        if not problems:
            problems += self._fit_problems()
        if problems:
            raise SpillPolicyError("invalid spill policy: " + "; ".join(problems))

    def _build_recognizers(self) -> list[str]:
        """Compile the recognizer rules in effect; return their problems."""
        problems: list[str] = []
        own = _as_tuple("recognizer_rules", self.recognizer_rules, problems)
        bad = [r for r in own if not hasattr(r, "pattern")]
        if bad:
            problems.append(f"recognizer_rules holds {shown(bad[0])}")
            own = ()
        disabled = _as_tuple(
            "disabled_recognizers", self.disabled_recognizers, problems
        )
        problems += _string_problems("disabled_recognizers", disabled)
        names = frozenset(d for d in disabled if isinstance(d, str))
        object.__setattr__(self, "recognizer_rules", own)
        object.__setattr__(self, "disabled_recognizers", names)
        object.__setattr__(self, "_recognizers", None)
        if not own and not names:
            return problems  # the packaged rules load on first use
        recognizers, found = build_recognizers(own, names)
        object.__setattr__(self, "_recognizers", recognizers)
        return problems + list(found)

    def _value_problems(self) -> list[str]:
        """Problems of the scalar fields and limits, each naming its key."""
        problems = _tool_limit_problems("default", self.default_limit)
        for name, limit in self.tool_limits.items():
            if not isinstance(name, str) or not name:
                problems.append(
                    f"tools: tool name {shown(name)} must be a non-empty string"
                )
                continue
            problems += _tool_limit_problems(f"tools.{name}", limit)
        for key, check in _SCALAR_CHECKS.items():
            problems += check(key, getattr(self, key))
        if not callable(self.token_counter):
            problems.append("token_counter must be callable")
        return problems

    def _fit_problems(self) -> list[str]:
        """Name each budget too small for the worst-case header and notice."""
        problems = []
        checks = [("default", DEFAULT_TOOL_PLACEHOLDER, self.default_limit)]
        checks += [(f"tools.{n}", n, lim) for n, lim in self.tool_limits.items()]
        for key, tool_name, limit in checks:
            worst = worst_fixed_size(self, tool_name, limit.unit, is_error=True)
            if worst > limit.budget:
                which = "limit" if limit.preview_budget is None else "preview_budget"
                problems.append(
                    f"{key}.{which} {limit.budget} {limit.unit} cannot hold the "
                    f"worst-case header and notice ({worst} {limit.unit} with "
                    f"max_handle_length={self.max_handle_length}, "
                    f"max_hint_length={self.max_hint_length})"
                )
        return problems

    def _all_tools(self) -> dict[str, ToolLimit]:
        """Return the own limits, spelling out built-in tools that use the default."""
        # `tools` in a mapping merges over the built-ins, so a built-in tool
        # that follows the default must be written out to stay that way.
        spelled = dict.fromkeys(DEFAULT_TOOL_LIMITS, self.default_limit)
        return {**spelled, **self.tool_limits}

    def limit_for(self, tool_name: str) -> ToolLimit:
        """Return the tool's own limit, else the default (exact, case-sensitive)."""
        return self.tool_limits.get(tool_name, self.default_limit)

    def measure(self, text: str, unit: SizeUnit) -> int:
        """Return the size of `text` in `unit` (bytes: UTF-8 with surrogatepass)."""
        if unit == SizeUnit.CHARS:
            return len(text)
        if unit == SizeUnit.BYTES:
            return len(text.encode("utf-8", "surrogatepass"))
        if unit == SizeUnit.TOKENS:
            return self.token_counter(text)
        msg = f"unknown unit {unit!r}"
        raise ValueError(msg)

    def is_exempt(self, tool_name: str) -> bool:
        """Tell whether a tool is self-bounded on the model arm (exact match)."""
        return tool_name in self.exempt_tools

    def is_key_line(self, line: str) -> bool:
        """Tell whether a key-line pattern or a recognizer matches `line`."""
        return self._matcher(line) or self.recognizers.index(line) is not None

    def recognize(self, line: str) -> Recognition | None:
        """Return the recognizer rule that matches `line`, and its kind, if any."""
        recognizers = self.recognizers
        index = recognizers.index(line)
        return None if index is None else recognizers.recognition(index)

    def judge_key_line(self, scanned: str) -> Recognition | bool:
        """Judge a line's scanned start: its recognition, else whether it is key.

        `scanned` is the line's first SCAN_CHARS characters and the one after
        them, if any (a recognizer's context; the words see only the first).
        """
        recognizers = self.recognizers
        index = recognizers.index(scanned)
        if index is not None:
            return recognizers.recognition(index)
        return self._matcher(scanned[:SCAN_CHARS])

    @property
    def recognizers(self) -> Recognizers:
        """The recognizer rules in effect, compiled (loaded on first use)."""
        recognizers = self._recognizers
        if recognizers is None:
            recognizers = build_recognizers((), frozenset())[0]
            object.__setattr__(self, "_recognizers", recognizers)
        return recognizers

    @property
    def key_line_screen(self) -> re.Pattern[str] | None:
        """A literal search that every key line's fold_case() text passes, or None."""
        # Known only for the built-in patterns; custom ones are matched line by line.
        builtin = self.key_line_patterns == DEFAULT_KEY_LINE_PATTERNS
        return _SCREEN if builtin else None

    def to_mapping(self) -> dict[str, Any]:
        """Return the policy in the schema `from_mapping` reads (no token counter)."""
        if self.recognizer_rules:
            msg = (
                "cannot write a policy's recognizer rules back: they come from "
                "the rule files its `recognizers` key names"
            )
            raise SpillPolicyError(msg)
        return {
            "default": _limit_mapping(self.default_limit),
            "tools": {n: _limit_mapping(lim) for n, lim in self._all_tools().items()},
            "head_ratio": self.head_ratio,
            "tail_ratio": self.tail_ratio,
            "exempt_tools": sorted(self.exempt_tools),
            "key_line_patterns": list(self.key_line_patterns),
            "max_key_lines": self.max_key_lines,
            "max_handle_length": self.max_handle_length,
            "max_hint_length": self.max_hint_length,
            "redact_secrets": self.redact_secrets,
            "disabled_recognizers": sorted(self.disabled_recognizers),
        }

    def to_toml(self) -> str:
        """Return the policy as TOML text that `from_toml` reads back equal."""
        data = self.to_mapping()
        lines = [
            f"{key} = {_toml_value(data[key])}"
            for key in (
                "head_ratio",
                "tail_ratio",
                "exempt_tools",
                "key_line_patterns",
                "max_key_lines",
                "max_handle_length",
                "max_hint_length",
                "disabled_recognizers",
            )
        ]
        lines.append(f"redact_secrets = {str(self.redact_secrets).lower()}")
        sections = [("default", data["default"])]
        sections += [
            (f"tools.{_toml_string(name)}", table)
            for name, table in sorted(data["tools"].items())
        ]
        for header, table in sections:
            lines += ["", f"[{header}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_mapping(
        cls,
        data: Mapping[str, Any],
        *,
        token_counter: TokenCounter | None = None,
        rule_loader: RuleLoader | None = None,
    ) -> SpillPolicy:
        """Build a policy from plain data, naming every bad key at once."""
        problems: list[str] = []
        if not isinstance(data, Mapping):
            msg = f"invalid spill policy: expected a mapping, not {type(data).__name__}"
            raise SpillPolicyError(msg)
        problems += [
            f"unknown key {_named(key)}" for key in data if key not in _TOP_KEYS
        ]
        kwargs: dict[str, Any] = {}
        if "default" in data:
            limit = _parse_limit("default", data["default"], problems)
            if limit is not None:
                kwargs["default_limit"] = limit
        if "tools" in data:
            kwargs["tool_limits"] = _parse_tools(data["tools"], problems)
        for key, check in _SCALAR_CHECKS.items():
            if key in data:
                problems += check(key, data[key])
                kwargs[key] = data[key]
        kwargs.update(_parse_lists(data, problems))
        kwargs.update(_parse_recognizers(data, problems, rule_loader))
        if problems:
            raise SpillPolicyError("invalid spill policy: " + "; ".join(problems))
        if token_counter is not None:
            kwargs["token_counter"] = token_counter
        return cls(**kwargs)

    @classmethod
    def from_toml(
        cls,
        text: str,
        *,
        token_counter: TokenCounter | None = None,
        rule_loader: RuleLoader | None = None,
    ) -> SpillPolicy:
        """Build a policy from TOML text (the schema of `from_mapping`)."""
        if not isinstance(text, str):
            kind = type(text).__name__
            msg = f"invalid spill policy: TOML text must be str, not {kind}"
            raise SpillPolicyError(msg)
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = f"invalid spill policy: not valid TOML: {exc}"
            raise SpillPolicyError(msg) from exc
        return cls.from_mapping(
            data, token_counter=token_counter, rule_loader=rule_loader
        )


def _parse_limit(key: str, raw: object, problems: list[str]) -> ToolLimit | None:
    """Check one limit table; return its ToolLimit when it is valid."""
    if not isinstance(raw, Mapping):
        problems.append(f"{key} must be a table with limit and unit")
        return None
    found = len(problems)
    problems += [f"unknown key {key}.{_named(k)}" for k in raw if k not in _LIMIT_KEYS]
    for required in ("limit", "unit"):
        if required not in raw:
            problems.append(f"{key}.{required} is required")
    if "limit" in raw:
        problems += _positive_int_problem(f"{key}.limit", raw["limit"])
    unit = raw.get("unit")
    if "unit" in raw and not (isinstance(unit, str) and unit in _UNITS):
        problems.append(
            f"{key}.unit must be one of {sorted(_UNITS)}, not {shown(unit)}"
        )
    budget = raw.get("preview_budget")
    if "preview_budget" in raw:
        problems += _positive_int_problem(f"{key}.preview_budget", budget)
    if len(problems) > found:
        return None
    if budget is not None and budget > raw["limit"]:
        problems.append(
            f"{key}.preview_budget {budget} must not exceed {key}.limit {raw['limit']}"
        )
        return None
    return ToolLimit(raw["limit"], SizeUnit(str(unit)), budget)


def _parse_tools(raw: object, problems: list[str]) -> dict[str, ToolLimit]:
    """Merge the per-tool tables over the built-in tool limits."""
    merged = dict(DEFAULT_TOOL_LIMITS)
    if not isinstance(raw, Mapping):
        problems.append("tools must be a table of tool tables")
        return merged
    for name, table in raw.items():
        if not isinstance(name, str) or not name:
            problems.append(
                f"tools: tool name {shown(name)} must be a non-empty string"
            )
            continue
        limit = _parse_limit(f"tools.{name}", table, problems)
        if limit is not None:
            merged[name] = limit
    return merged


def _parse_lists(data: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Check the two list keys; return what to pass on to the constructor."""
    kwargs: dict[str, Any] = {}
    if "exempt_tools" in data:
        tools = _as_tuple("exempt_tools", data["exempt_tools"], problems)
        problems += _string_problems("exempt_tools", tools)
        kwargs["exempt_tools"] = tools
    if "key_line_patterns" in data:
        patterns = _as_tuple("key_line_patterns", data["key_line_patterns"], problems)
        compile_key_line_patterns(patterns, problems, built_in=_BUILT_IN_PATTERNS)
        kwargs["key_line_patterns"] = patterns
    return kwargs


def _parse_recognizers(
    data: Mapping[str, Any], problems: list[str], loader: RuleLoader | None
) -> dict[str, Any]:
    """Check the recognizer keys; load the rule files `recognizers` names."""
    kwargs: dict[str, Any] = {}
    if "disabled_recognizers" in data:
        disabled = _as_tuple(
            "disabled_recognizers", data["disabled_recognizers"], problems
        )
        problems += _string_problems("disabled_recognizers", disabled)
        kwargs["disabled_recognizers"] = frozenset(
            d for d in disabled if isinstance(d, str)
        )
    if "recognizers" in data:
        paths = _as_tuple("recognizers", data["recognizers"], problems)
        found = len(problems)
        problems += _string_problems("recognizers", paths)
        if loader is None:
            problems.append(
                "recognizers: rule files are read by a policy file's loader "
                "(paths are relative to the policy file)"
            )
        if len(problems) == found:
            rules: list[RecognizerRule] = []
            for index, path in enumerate(paths):
                try:
                    rules += loader(path) if loader is not None else ()
                # A RecognizerRuleError (a ValueError) names the file and line.
                except (ValueError, OSError) as error:
                    problems.append(f"recognizers[{index}] {error}")
            kwargs["recognizer_rules"] = tuple(rules)
    return kwargs


def _named(key: object) -> str:
    """Return a mapping key as a message names it."""
    return key if isinstance(key, str) else shown(key)


def _as_tuple(key: str, raw: object, problems: list[str]) -> tuple[Any, ...]:
    """Return the items of a list-like value; name `key` when it is not one."""
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
        problems.append(f"{key} must be a list of strings, not {shown(raw)}")
        return ()
    return tuple(raw)


def _string_problems(key: str, items: tuple[Any, ...]) -> list[str]:
    """Name each entry of `key` that is not a string."""
    return [
        f"{key}[{index}] must be a string, not {shown(item)}"
        for index, item in enumerate(items)
        if not isinstance(item, str)
    ]


def _limit_mapping(limit: ToolLimit) -> dict[str, Any]:
    """Return one limit table, leaving out an unset preview budget."""
    table: dict[str, Any] = {"limit": limit.limit, "unit": str(limit.unit)}
    if limit.preview_budget is not None:
        table["preview_budget"] = limit.preview_budget
    return table


def _toml_string(text: str) -> str:
    """Return a TOML basic string (control characters escaped)."""
    out = []
    for char in text:
        code = ord(char)
        if char in {'"', "\\"}:
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            msg = f"cannot write a lone surrogate to TOML: {text!r}"
            raise SpillPolicyError(msg)
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_value(value: object) -> str:
    """Return a TOML literal for the schema's value types."""
    if isinstance(value, bool):  # never in the schema; refuse rather than guess
        msg = f"unexpected boolean {value!r}"
        raise SpillPolicyError(msg)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    msg = f"cannot write {value!r} to TOML"
    raise SpillPolicyError(msg)
