"""Spill policy: units, seed defaults, validation naming each key, TOML (S1.3)."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.adapters.cli.policy_file import load_policy_file
from spillvault.domain.constants import (
    BASH_MAX_OUTPUT_LENGTH,
    HEAD_BYTES,
    TAIL_BYTES,
    TOOL_RESULT_THRESHOLD_KB,
)
from spillvault.domain.enums import SizeUnit
from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.policy import (
    DEFAULT_KEY_LINE_PATTERNS,
    EXAMPLE_TOML,
    SCREEN_WORDS,
    SpillPolicy,
    ToolLimit,
    default_token_counter,
    fold_case,
)

from support.child import json_from_child
from support.numbers import BEYOND_STR, HUGE, hostile_numbers, is_finite, is_int

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

# ---------------------------------------------------------------- defaults


def test_defaults_are_the_seed() -> None:
    policy = SpillPolicy()
    assert policy.limit_for("bash") == ToolLimit(BASH_MAX_OUTPUT_LENGTH, SizeUnit.CHARS)
    assert policy.limit_for("bash") == ToolLimit(30000, SizeUnit.CHARS)
    for tool in ("grep", "web_fetch", "Bash", "read"):
        assert policy.limit_for(tool) == ToolLimit(51200, SizeUnit.BYTES)
    assert TOOL_RESULT_THRESHOLD_KB * 1024 == 51200
    assert policy.limit_for("bash").budget == 30000  # preview budget = limit
    assert policy.limit_for("grep").budget == 51200
    assert (policy.head_ratio, policy.tail_ratio) == (1, 4)
    assert HEAD_BYTES * policy.tail_ratio == TAIL_BYTES * policy.head_ratio
    assert policy.exempt_tools == {
        "read",
        "read_file",
        "read_artifact",
        "grep_artifact",
    }
    assert policy.max_key_lines == 40
    # a handle is at most 64 characters, each at most 4 UTF-8 bytes
    assert (policy.max_handle_length, policy.max_hint_length) == (256, 320)
    assert policy.token_counter is default_token_counter


def test_an_empty_mapping_and_empty_toml_give_the_defaults() -> None:
    assert SpillPolicy.from_mapping({}) == SpillPolicy()
    assert SpillPolicy.from_toml("") == SpillPolicy()


def test_the_documented_example_is_the_defaults() -> None:
    assert SpillPolicy.from_toml(EXAMPLE_TOML) == SpillPolicy()
    assert SpillPolicy.from_toml(SpillPolicy().to_toml()) == SpillPolicy()


def test_exemption_is_exact_and_case_sensitive() -> None:
    policy = SpillPolicy()
    assert policy.is_exempt("read_artifact")
    assert not policy.is_exempt("Read")
    assert not policy.is_exempt("read ")
    assert not policy.is_exempt("bash")
    custom = SpillPolicy.from_mapping({"exempt_tools": ["cat"]})
    assert custom.is_exempt("cat")
    assert not custom.is_exempt("read")


def test_a_preview_budget_overrides_the_limit_as_budget() -> None:
    limit = ToolLimit(40000, SizeUnit.BYTES, preview_budget=20000)
    assert limit.budget == 20000
    assert ToolLimit(40000, SizeUnit.BYTES).budget == 40000
    same = ToolLimit(40000, SizeUnit.BYTES, preview_budget=40000)
    assert same == ToolLimit(40000, SizeUnit.BYTES)


def test_policies_are_immutable_and_hashable() -> None:
    policy = SpillPolicy()
    assert hash(policy) == hash(SpillPolicy())
    with pytest.raises(TypeError):
        policy.tool_limits["grep"] = ToolLimit(1, SizeUnit.BYTES)  # type: ignore[index]


# ---------------------------------------------------------------- measuring


def test_measure_in_each_unit() -> None:
    policy = SpillPolicy()
    text = "a字😀e\u0301\r\n"
    assert policy.measure(text, SizeUnit.CHARS) == 7
    assert policy.measure(text, SizeUnit.BYTES) == 1 + 3 + 4 + 1 + 2 + 2
    assert policy.measure(text, SizeUnit.TOKENS) == default_token_counter(text)
    # a lone surrogate is measured (surrogatepass), never an error
    assert policy.measure("\ud800", SizeUnit.BYTES) == 3


def test_measure_agrees_with_the_limit_exactly_at_and_one_over() -> None:
    policy = SpillPolicy()
    bash = policy.limit_for("bash")
    at = "é" * bash.limit
    assert policy.measure(at, bash.unit) == bash.limit  # chars, not bytes
    assert policy.measure(at + "x", bash.unit) == bash.limit + 1
    grep = policy.limit_for("grep")
    at_bytes = "😀" * (grep.limit // 4)
    assert policy.measure(at_bytes, grep.unit) == grep.limit
    assert policy.measure(at_bytes + "x", grep.unit) == grep.limit + 1


def test_a_pluggable_token_counter_is_used() -> None:
    def words(text: str) -> int:
        return len(text.split())

    policy = SpillPolicy(token_counter=words)
    assert policy.measure("one two  three", SizeUnit.TOKENS) == 3
    loaded = SpillPolicy.from_mapping({}, token_counter=words)
    assert loaded.token_counter is words


# ---------------------------------------------------------------- tokens


def reference_count(text: str) -> int:
    """Count run by run, as the default counter's comment describes."""
    count = 0
    for run in re.finditer(r"[A-Za-z]+|[0-9]+|\s+|[^A-Za-z0-9\s]", text):
        piece = run.group()
        if piece[0].isascii() and piece[0].isalpha():
            count += math.ceil(len(piece) / 8)
        elif piece[0] in "0123456789":
            count += math.ceil(len(piece) / 3)
        elif piece[0].isspace():
            chunks = math.ceil(len(piece) / 4)
            lone_space_last = len(piece) % 4 == 1 and piece[-1] == " "
            count += chunks - lone_space_last
        else:
            count += 1
    return count


token_texts = st.text(
    alphabet=st.one_of(
        st.characters(),
        st.sampled_from([" ", "\n", "\t", "a", "Z", "7", "字", "😀", "\u2028"]),
    ),
    max_size=80,
)


def test_default_token_counter_examples() -> None:
    assert default_token_counter("") == 0
    assert default_token_counter("hello world") == 2
    assert default_token_counter("1234567") == 3
    assert default_token_counter("字字😀") == 3
    assert default_token_counter("   ") == 1
    assert default_token_counter(" ") == 0
    assert default_token_counter("Traceback (most recent call last):") == 9


@given(token_texts)
def test_default_token_counter_matches_its_description(text: str) -> None:
    assert default_token_counter(text) == reference_count(text)


@given(token_texts, st.integers(min_value=0, max_value=80))
def test_default_token_counter_is_monotone_under_prefix_and_suffix(
    text: str, cut: int
) -> None:
    whole = default_token_counter(text)
    assert default_token_counter(text[:cut]) <= whole
    assert default_token_counter(text[cut:]) <= whole
    assert default_token_counter(text) == whole  # deterministic


# ---------------------------------------------------------------- key lines


def test_default_key_line_patterns_are_case_insensitive() -> None:
    policy = SpillPolicy()
    for line in (
        "Traceback (most recent call last):",
        "TypeError: unsupported operand",
        "ERROR: build broke",
        "FAILED tests/test_x.py::test_y",
        "1 failure",
        "thread 'main' panicked at src/main.rs",
        "fatal: not a git repository",
        "AssertionError",
        "Segmentation fault (core dumped)",
        "java.lang.NullPointerException",
    ):
        assert policy.is_key_line(line), line
    for line in ("all good", "errand", "42 passed", ""):
        assert not policy.is_key_line(line), line


@pytest.mark.parametrize(
    ("patterns", "hit", "miss"),
    [
        ((r"(a)(b)",), "xabx", "xa"),  # groups
        (("(?s)boom", "zap"), "BOOM", "bo om"),  # inline global flags
        (("foo", "bar"), "a BAR b", "baz"),
        ((), None, "error"),
    ],
)
def test_custom_patterns_match_as_written(
    patterns: tuple[str, ...], hit: str | None, miss: str
) -> None:
    policy = SpillPolicy(key_line_patterns=patterns)
    if hit is not None:
        assert policy.is_key_line(hit)
    assert not policy.is_key_line(miss)


def test_fold_case_agrees_with_ignorecase_on_every_screen_letter() -> None:
    letters = sorted(set("".join(SCREEN_WORDS)) - {" "})
    every = "".join(
        chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF
    )
    hits = set(re.findall("[" + "".join(letters) + "]", every, re.IGNORECASE))
    assert len(hits) > 2 * len(letters)  # upper case, and the odd few
    for char in hits:
        for letter in letters:
            if re.fullmatch(letter, char, re.IGNORECASE):
                assert fold_case(char) == letter, (char, letter)


def test_the_screen_is_only_for_the_built_in_patterns() -> None:
    assert SpillPolicy().key_line_screen is not None
    assert SpillPolicy(key_line_patterns=("error",)).key_line_screen is None


screen_lines = st.lists(
    st.one_of(
        st.characters(),
        st.sampled_from(["\u0130", "\u0131", "\u017f", "\u212a", "_", " "]),
        st.sampled_from([*SCREEN_WORDS, "ERROR", "Failed", "TypeError", "ASSERTION"]),
    ),
    max_size=12,
).map("".join)


@given(screen_lines)
def test_every_built_in_key_line_passes_the_screen(line: str) -> None:
    policy = SpillPolicy()
    screen = policy.key_line_screen
    assert screen is not None
    if policy.is_key_line(line):
        assert screen.search(fold_case(line))


# Python's re reads the built-in patterns so: Unicode word boundaries, IGNORECASE.
PYTHON_BUILT_INS = re.compile(
    "|".join(f"(?:{p})" for p in DEFAULT_KEY_LINE_PATTERNS), re.IGNORECASE
)
unicode_lines = st.lists(
    st.one_of(
        st.characters(),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.sampled_from(
            ["\u0130", "\u0131", "\u017f", "\u212a", "_", " ", "\u00e9", "\u5b57"]
        ),
        st.sampled_from(["\u0661", "\u00a0", "\u0301", "\u2028", "\ufffd", "\t"]),
        st.sampled_from(
            [*SCREEN_WORDS, "ERROR", "Failures", "TypeError", "ASSERTION", "panicked"]
        ),
        st.sampled_from(["fa\u0130l", "\u017fegmentation fault", "core  dumped"]),
    ),
    max_size=12,
).map("".join)


@given(unicode_lines)
def test_built_in_key_lines_mean_what_python_re_means(line: str) -> None:
    expected = PYTHON_BUILT_INS.search(line) is not None
    assert SpillPolicy().is_key_line(line) == expected


@pytest.mark.parametrize(
    "line",
    ["error\u00e9", "\u00e9fatal", "x_traceback", "FAILED\u5b57", "\u0661abort",
     "segmentation\u00a0fault", "assert\u0130on", "fa\u0131led", "\u212aerror",
     "abort\u0301", "\udc80panic", "panic\ud800", "fatal\u2028", "core dumped_"],
)  # fmt: skip
def test_key_words_next_to_unicode_are_judged_as_python_re_judges_them(
    line: str,
) -> None:
    expected = PYTHON_BUILT_INS.search(line) is not None
    assert SpillPolicy().is_key_line(line) == expected


# ------------------------------------------------- key lines in linear time (S1.2)


@pytest.mark.parametrize(
    ("pattern", "fault"),
    [
        (r"^(a+)+\1$", "does not compile"),  # a backreference
        (r"(?=error)\w+", "does not compile"),  # lookahead
        (r"(?<!no )error", "does not compile"),  # lookbehind
        (r"(?>a+)b", "does not compile"),  # atomic group
        (r"a++b", "does not compile"),  # possessive
        (r".{1000}x.{1000}", "does not compile"),  # too large for the engine
        ("err\x00or", "NUL"),
        ("err\ud800or", "surrogate"),
        ("a" * 1001, "longer than 1000 characters"),
    ],
)
def test_patterns_no_linear_time_engine_runs_are_refused_by_index(
    pattern: str, fault: str
) -> None:
    with pytest.raises(SpillPolicyError, match=rf"key_line_patterns\[0\] .*{fault}"):
        SpillPolicy.from_mapping({"key_line_patterns": [pattern]})
    with pytest.raises(SpillPolicyError, match=rf"key_line_patterns\[1\] .*{fault}"):
        SpillPolicy(key_line_patterns=("ok", pattern))


def test_the_number_of_patterns_is_bounded() -> None:
    most = [f"word{n}" for n in range(64)]
    assert SpillPolicy.from_mapping({"key_line_patterns": most}).is_key_line("WORD63")
    with pytest.raises(SpillPolicyError, match="key_line_patterns holds 65 patterns"):
        SpillPolicy.from_mapping({"key_line_patterns": [*most, "one more"]})


# Exponential for a backtracking engine on a line of a's that does not end right.
CATASTROPHIC = (
    r"^(a+)+$",
    r"(a|aa)+b",
    r"(a|a?)+c",
    r"^(\w+\s?)+$",
    r"(.*a){12}z",
    r"(x+x+)+y",
    r"^(([a-z])+.)+[A-Z]([a-z])+$",
    r"(a*)*d",
)


def test_patterns_catastrophic_for_backtracking_are_run_in_linear_time() -> None:
    lines = ["aaaa", "xxxy", "A" * 30 + "D", "a" * 35 + "!", "a" * 500 + "!"]
    lines += ["x" * 499 + "!", "xy " * 160 + "!"]
    judged = json_from_child(
        """
        import json, sys
        from spillvault.domain.policy import SpillPolicy
        patterns, lines = json.load(sys.stdin)
        policy = SpillPolicy.from_mapping({"key_line_patterns": patterns})
        print(json.dumps([policy.is_key_line(line) for line in lines]))
        """,
        [CATASTROPHIC, lines],
    )
    # the first three match (case-insensitively, as every pattern does)
    assert judged == [True, True, True, False, False, False, False]


def test_custom_patterns_see_lone_surrogates_as_python_re_does() -> None:
    policy = SpillPolicy(key_line_patterns=(r"^.error$", r"^x[^a]y$"))
    assert policy.is_key_line("\udc80error")
    assert policy.is_key_line("x\ud800y")
    assert not policy.is_key_line("\ud800\udc00error")  # `.` takes one of the two
    assert not policy.is_key_line("\udc80")


regexish = st.lists(
    st.one_of(
        st.sampled_from(list("()[]{}*+?|\\^$.-,:<>=!#&~ ab1Z")),
        st.sampled_from(["\\b", "\\1", "(?", "(?P<n>", "\\x{", "\\p{", "{99999}"]),
        st.sampled_from(["\\Q", "\\E", "(?i)", "(?s", "[[:", "\\N", "\\C", "\\R"]),
        st.characters(),
    ),
    max_size=24,
).map("".join)


@given(
    st.lists(
        st.one_of(regexish, st.text(max_size=12), st.integers(), st.none()),
        max_size=4,
    )
)
def test_any_patterns_compile_or_are_a_policy_error_naming_them(
    patterns: list[Any],
) -> None:
    problem = refusal(lambda: SpillPolicy.from_mapping({"key_line_patterns": patterns}))
    if problem is not None:
        assert "key_line_patterns" in problem
        with pytest.raises(SpillPolicyError, match=r"key_line_patterns"):
            SpillPolicy(key_line_patterns=tuple(patterns))
        return
    policy = SpillPolicy.from_mapping({"key_line_patterns": patterns})
    assert SpillPolicy(key_line_patterns=tuple(patterns)) == policy
    for line in ("", "error", "a" * 600, "\udc80 \u5b57", "x\ny"):
        assert policy.is_key_line(line) in {True, False}


# ---------------------------------------------------------------- validation

BAD: list[tuple[dict[str, Any], str]] = [
    ({"default": {"limit": -1, "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": 0, "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": 60000.5, "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": 60000.0, "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": "60000", "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": True, "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": None, "unit": "bytes"}}, "default.limit"),
    ({"default": {"unit": "bytes"}}, "default.limit is required"),
    ({"default": {"limit": 60000}}, "default.unit is required"),
    ({"default": {"limit": 60000, "unit": "words"}}, "default.unit"),
    ({"default": {"limit": 60000, "unit": "Bytes"}}, "default.unit"),
    ({"default": {"limit": 60000, "unit": "bytes", "size": 1}}, "default.size"),
    ({"default": "big"}, "default must be a table"),
    ({"tools": {"bash": {"limit": 0, "unit": "chars"}}}, "tools.bash.limit"),
    ({"tools": {"bash": {"limit": -5, "unit": "chars"}}}, "tools.bash.limit"),
    ({"tools": {"bash": {"limit": 1.5, "unit": "chars"}}}, "tools.bash.limit"),
    ({"tools": {"bash": {"limit": 30000, "unit": "lines"}}}, "tools.bash.unit"),
    ({"tools": {"bash": {"limit": 30000, "unit": "chars", "x": 1}}}, "tools.bash.x"),
    ({"tools": {"bash": {"limit": 30000}}}, "tools.bash.unit is required"),
    ({"tools": {"bash": 30000}}, "tools.bash must be a table"),
    ({"tools": ["bash"]}, "tools must be a table"),
    (
        {"tools": {"g": {"limit": 30000, "unit": "chars", "preview_budget": 0}}},
        "tools.g.preview_budget",
    ),
    (
        {"tools": {"g": {"limit": 30000, "unit": "chars", "preview_budget": 2.5}}},
        "tools.g.preview_budget",
    ),
    (
        {"tools": {"g": {"limit": 30000, "unit": "chars", "preview_budget": 30001}}},
        "tools.g.preview_budget 30001 must not exceed",
    ),
    ({"limits": {}}, "unknown key limits"),
    ({"head_ratio": 0}, "head_ratio"),
    ({"head_ratio": -1}, "head_ratio"),
    ({"head_ratio": "1"}, "head_ratio"),
    ({"head_ratio": True}, "head_ratio"),
    ({"head_ratio": math.nan}, "head_ratio"),
    ({"head_ratio": math.inf}, "head_ratio"),
    ({"tail_ratio": 0}, "tail_ratio"),
    ({"tail_ratio": -0.5}, "tail_ratio"),
    ({"exempt_tools": "read"}, "exempt_tools must be a list"),
    ({"exempt_tools": ["read", 7]}, "exempt_tools[1]"),
    ({"key_line_patterns": ["("]}, "key_line_patterns[0] does not compile"),
    ({"key_line_patterns": ["ok", "[a-"]}, "key_line_patterns[1] does not compile"),
    ({"key_line_patterns": [b"x"]}, "key_line_patterns[0] must be a string"),
    ({"key_line_patterns": ["x", ["y"]]}, "key_line_patterns[1] must be a string"),
    ({"key_line_patterns": "error"}, "key_line_patterns must be a list"),
    ({"max_key_lines": -1}, "max_key_lines"),
    ({"max_key_lines": 2.5}, "max_key_lines"),
    ({"max_handle_length": 0}, "max_handle_length"),
    ({"max_handle_length": "4096"}, "max_handle_length"),
    ({"max_hint_length": -3}, "max_hint_length"),
    # too large to mean anything, or to convert: a typed error, not OverflowError
    ({"max_handle_length": HUGE}, "max_handle_length"),
    ({"max_hint_length": 2**70}, "max_hint_length"),
    ({"max_key_lines": HUGE}, "max_key_lines"),
    ({"head_ratio": BEYOND_STR}, "head_ratio"),
    ({"tail_ratio": 1e300}, "tail_ratio"),
    ({"default": {"limit": BEYOND_STR, "unit": "bytes"}}, "default.limit"),
    ({"default": {"limit": 2**63, "unit": "bytes"}}, "default.limit"),
    (
        {"default": {"limit": 60000, "unit": "bytes", "preview_budget": -HUGE}},
        "default.preview_budget",
    ),
    # budgets that cannot hold the worst-case header and notice
    ({"default": {"limit": 1000, "unit": "bytes"}}, "default.limit 1000 bytes"),
    ({"default": {"limit": 1500, "unit": "tokens"}}, "default.limit 1500 tokens"),
    (
        {"tools": {"bash": {"limit": 30000, "unit": "chars", "preview_budget": 500}}},
        "tools.bash.preview_budget 500 chars",
    ),
    (
        {"max_handle_length": 40000},
        "tools.bash.limit 30000 chars cannot hold",
    ),
]


@pytest.mark.parametrize(("data", "key"), BAD, ids=[key for _, key in BAD])
def test_each_bad_key_is_named(data: dict[str, Any], key: str) -> None:
    with pytest.raises(SpillPolicyError) as caught:
        SpillPolicy.from_mapping(data)
    assert key in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_all_problems_are_reported_at_once() -> None:
    data = {
        "default": {"limit": -1, "unit": "bytes"},
        "tools": {"bash": {"limit": 30000, "unit": "furlongs"}},
        "head_ratio": 0,
        "colour": "blue",
        "key_line_patterns": ["("],
    }
    with pytest.raises(SpillPolicyError) as caught:
        SpillPolicy.from_mapping(data)
    message = str(caught.value)
    for key in (
        "default.limit",
        "tools.bash.unit",
        "head_ratio",
        "unknown key colour",
        "key_line_patterns[0]",
    ):
        assert key in message


def test_the_budget_check_uses_the_declared_handle_length() -> None:
    # 2,400 bytes hold the fixed parts with 64-byte handles, not 256-byte ones.
    small = {"default": {"limit": 2400, "unit": "bytes"}}
    with pytest.raises(SpillPolicyError, match="max_handle_length=256"):
        SpillPolicy.from_mapping(small)
    policy = SpillPolicy.from_mapping(
        {**small, "max_handle_length": 64, "max_hint_length": 100}
    )
    assert policy.limit_for("grep").limit == 2400


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"head_ratio": 0}, "head_ratio"),
        ({"tail_ratio": -1}, "tail_ratio"),
        ({"max_key_lines": -1}, "max_key_lines"),
        ({"key_line_patterns": ("(",)}, "key_line_patterns[0]"),
        ({"default_limit": ToolLimit(900, SizeUnit.BYTES)}, "default.limit 900"),
        ({"tool_limits": {"bash": "30000"}}, "tools.bash must be a ToolLimit"),
        ({"exempt_tools": "read"}, "exempt_tools must be a list"),
    ],
)
def test_direct_construction_is_validated_too(kwargs: dict[str, Any], key: str) -> None:
    with pytest.raises(SpillPolicyError) as caught:
        SpillPolicy(**kwargs)
    assert key in str(caught.value)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ((0, "bytes"), "ToolLimit.limit"),
        ((1.5, "bytes"), "ToolLimit.limit"),
        ((100, "words"), "ToolLimit.unit"),
        ((100, "bytes", 0), "ToolLimit.preview_budget"),
        ((100, "bytes", 101), "ToolLimit.preview_budget 101 must not exceed"),
    ],
)
def test_tool_limits_validate_themselves(args: tuple[Any, ...], key: str) -> None:
    with pytest.raises(SpillPolicyError, match=re.escape(key)):
        ToolLimit(*args)


MAX_SIZE = 2**63 - 1  # a limit or budget: what a signed 64-bit integer holds
INTEGER_RANGES = {
    "default.limit": (1, MAX_SIZE),
    "default.preview_budget": (1, MAX_SIZE),
    "tools.bash.limit": (1, MAX_SIZE),
    "tools.bash.preview_budget": (1, MAX_SIZE),
    "max_key_lines": (0, 1000),
    "max_handle_length": (1, 65536),
    "max_hint_length": (1, 65536),
}
RATIOS = ("head_ratio", "tail_ratio")


def setting(key: str, value: object) -> dict[str, Any]:
    """A mapping that sets `key` (dotted for a limit table) to `value`."""
    table, _, field = key.rpartition(".")
    if not table:
        return {key: value}
    limits: dict[str, Any] = {"limit": MAX_SIZE, "unit": "chars", field: value}
    if table == "default":
        return {"default": limits}
    return {"tools": {table.split(".")[1]: limits}}


def in_range(key: str, value: object) -> bool:
    if key in RATIOS:
        return is_finite(value) and 0 < value <= 1e6  # type: ignore[operator]
    low, high = INTEGER_RANGES[key]
    return is_int(value) and low <= value <= high  # type: ignore[operator]


def refusal(build: Callable[[], object]) -> str | None:
    """Return the SpillPolicyError message `build()` raises, or None."""
    try:
        build()
    except SpillPolicyError as error:
        return str(error)
    return None


@given(key=st.sampled_from([*INTEGER_RANGES, *RATIOS]), value=hostile_numbers)
def test_every_numeric_setting_is_checked_by_name(key: str, value: object) -> None:
    table, _, field = key.rpartition(".")
    problems = {
        key: refusal(lambda: SpillPolicy.from_mapping(setting(key, value))),
        f"ToolLimit.{field}" if table else key: refusal(lambda: construct(key, value)),
    }
    for name, problem in problems.items():
        if in_range(key, value) or (
            name == "ToolLimit.preview_budget" and value is None
        ):
            # in range, a value may still leave no room for the header and notice
            assert problem is None or name in problem
        else:
            assert problem is not None
            assert name in problem
    if problems[key] is None:
        policy = SpillPolicy.from_mapping(setting(key, value))
        assert SpillPolicy.from_toml(policy.to_toml()) == policy


def construct(key: str, value: Any) -> None:
    """Build what holds `key` directly, without a mapping."""
    table, _, field = key.rpartition(".")
    if not table:
        SpillPolicy(**{key: value})
    elif field == "limit":
        ToolLimit(value, SizeUnit.CHARS)
    else:
        ToolLimit(MAX_SIZE, SizeUnit.CHARS, value)


def test_a_unit_given_as_text_becomes_the_enum() -> None:
    assert ToolLimit(100, "chars").unit is SizeUnit.CHARS  # type: ignore[arg-type]


# ---------------------------------------------------------------- TOML

EXAMPLE = """
head_ratio = 1
tail_ratio = 3
exempt_tools = ["read", "cat"]
key_line_patterns = ['\\bERR\\b', "warn(ing)?"]
max_key_lines = 3
max_handle_length = 1024

[default]
limit = 80000
unit = "bytes"
preview_budget = 40000

[tools.bash]
limit = 20000
unit = "chars"

[tools."web.fetch"]
limit = 8000
unit = "tokens"
"""


def test_toml_is_read_with_the_documented_schema() -> None:
    policy = SpillPolicy.from_toml(EXAMPLE)
    assert policy.limit_for("grep") == ToolLimit(80000, SizeUnit.BYTES, 40000)
    assert policy.limit_for("grep").budget == 40000
    assert policy.limit_for("bash") == ToolLimit(20000, SizeUnit.CHARS)
    assert policy.limit_for("web.fetch") == ToolLimit(8000, SizeUnit.TOKENS)
    assert (policy.head_ratio, policy.tail_ratio) == (1, 3)
    assert policy.exempt_tools == {"read", "cat"}
    assert policy.key_line_patterns == (r"\bERR\b", "warn(ing)?")
    assert policy.is_key_line("an err here")
    assert policy.max_key_lines == 3
    assert policy.max_handle_length == 1024


def test_toml_tools_merge_over_the_built_in_ones() -> None:
    policy = SpillPolicy.from_toml('[tools.grep]\nlimit = 9000\nunit = "chars"\n')
    assert policy.limit_for("grep") == ToolLimit(9000, SizeUnit.CHARS)
    assert policy.limit_for("bash") == ToolLimit(30000, SizeUnit.CHARS)


def test_toml_round_trip_of_the_example_and_the_defaults() -> None:
    for policy in (SpillPolicy(), SpillPolicy.from_toml(EXAMPLE)):
        assert SpillPolicy.from_toml(policy.to_toml()) == policy
        assert SpillPolicy.from_mapping(policy.to_mapping()) == policy


tool_names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12
)
limits = st.builds(
    lambda limit, unit, budget_share: ToolLimit(
        limit, unit, None if budget_share is None else max(limit * budget_share // 4, 1)
    ),
    st.integers(min_value=20000, max_value=10**9),
    st.sampled_from(list(SizeUnit)),
    st.none() | st.integers(min_value=2, max_value=4),
)


@given(
    default=limits,
    tools=st.dictionaries(tool_names, limits, max_size=4),
    ratios=st.tuples(
        st.integers(min_value=1, max_value=9) | st.floats(min_value=0.1, max_value=9),
        st.integers(min_value=1, max_value=9) | st.floats(min_value=0.1, max_value=9),
    ),
    exempt=st.frozensets(tool_names, max_size=4),
    # a NUL is refused in a pattern (Hyperscan would stop reading there)
    patterns=st.lists(
        tool_names.filter(lambda name: "\x00" not in name).map(re.escape), max_size=3
    ),
    max_key_lines=st.integers(min_value=0, max_value=9),
)
def test_toml_round_trip_property(
    *,
    default: ToolLimit,
    tools: dict[str, ToolLimit],
    ratios: tuple[float, float],
    exempt: frozenset[str],
    patterns: list[str],
    max_key_lines: int,
) -> None:
    policy = SpillPolicy(
        default_limit=default,
        tool_limits=tools,
        head_ratio=ratios[0],
        tail_ratio=ratios[1],
        exempt_tools=exempt,
        key_line_patterns=tuple(patterns),
        max_key_lines=max_key_lines,
        max_handle_length=1000,
        max_hint_length=200,
    )
    assert SpillPolicy.from_toml(policy.to_toml()) == policy


def test_bad_toml_is_a_policy_error() -> None:
    with pytest.raises(SpillPolicyError, match="not valid TOML"):
        SpillPolicy.from_toml("[default\nlimit = 1")
    with pytest.raises(SpillPolicyError, match="must be str"):
        SpillPolicy.from_toml(b"head_ratio = 1")  # type: ignore[arg-type]
    with pytest.raises(SpillPolicyError, match="expected a mapping"):
        SpillPolicy.from_mapping(["head_ratio"])  # type: ignore[arg-type]


def test_toml_errors_name_nested_keys() -> None:
    with pytest.raises(
        SpillPolicyError, match=r"tools\.bash\.limit must be a positive"
    ):
        SpillPolicy.from_toml('[tools.bash]\nlimit = -3\nunit = "chars"\n')


def test_policy_file_adapter(tmp_path: Path) -> None:
    path = tmp_path / "spill.toml"
    path.write_text(EXAMPLE, encoding="utf-8")
    assert load_policy_file(path) == SpillPolicy.from_toml(EXAMPLE)
    with pytest.raises(SpillPolicyError, match="cannot read"):
        load_policy_file(tmp_path / "missing.toml")
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(SpillPolicyError, match="cannot read"):
        load_policy_file(path)
