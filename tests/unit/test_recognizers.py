"""Recognizers: per-tool rules as data, their checks, kinds and facts (S1.6)."""

from __future__ import annotations

import io
from collections import Counter
from contextlib import redirect_stdout
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_key_lines import reference_key_lines

from spillvault.adapters.cli.main import main
from spillvault.adapters.cli.policy_file import load_policy_file
from spillvault.domain import screen
from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.key_lines import (
    KEY_LINE_SCAN_CHARS,
    KeyLineScanner,
    scan_region_facts,
    scan_text,
)
from spillvault.domain.policy import SpillPolicy
from spillvault.domain.recognizer_check import check_rule_file
from spillvault.domain.recognizers import Recognition
from spillvault.domain.terminal import clean_terminal
from spillvault.specs.recognizer_rules import (
    PACKAGED_FAMILIES,
    RULE_KINDS,
    RecognizerRule,
    RecognizerRuleError,
    load_packaged_rules,
    load_rules_text,
    packaged_rules,
)

if TYPE_CHECKING:
    from pathlib import Path

POLICY = SpillPolicy()


def test_every_packaged_rule_passes_its_examples_and_fixtures() -> None:
    files = load_packaged_rules()
    assert [file.family for file in files] == list(PACKAGED_FAMILIES)
    checks = [check for file in files for check in check_rule_file(file, POLICY)]
    assert [c for c in checks if not c.passed] == []
    assert len(checks) == len(packaged_rules()) >= 40
    assert {rule.kind for rule in packaged_rules()} <= set(RULE_KINDS)


@pytest.mark.parametrize(
    ("line", "rule", "kind"),
    [
        ("FAILED tests/x.py::t - ValueError: no", "pytest.failed", "failure"),
        ("=== 3 failed, 1287 passed in 4.2s ===", "pytest.summary", "summary"),
        ("FAIL: test_x (mod.Class)", "unittest.failed", "failure"),
        ("Ran 12 tests in 0.010s", "unittest.ran", "summary"),
        ("FAILED (failures=2)", "unittest.result", "summary"),
        ("0:00:01 [2/3] test_os failed", "regrtest.failed", "failure"),
        ("2 tests failed:", "regrtest.summary", "summary"),
        ("Failed example:", "doctest.failed_example", "failure"),
        ("app.py:12: error: Bad  [assignment]", "mypy.error", "error"),
        ("Found 2 errors in 1 file (checked 1 source file)", "mypy.summary", "summary"),
        ("x.py:12:5: E501 Line too long", "lint.code", "warning"),
        ("  12:5  error  'x' is never used  no-unused-vars", "eslint.error", "error"),
        ("a.ts(3,5): error TS2322: Type", "tsc.error", "error"),
        ("file.c:3:5: error: expected ';'", "cc.error", "error"),
        ("file.c:3:5: warning: unused", "cc.warning", "warning"),
        ("error[E0308]: mismatched types", "rust.error", "error"),
        (" --> src/main.rs:2:5", "rust.location", "location"),
        ("warning: unused variable: `x`", "rust.warning", "warning"),
        ("X.java:3: error: cannot find symbol", "javac.error", "error"),
        ("./x.go:3:2: undefined: foo", "go.compile", "error"),
        ("Traceback (most recent call last):", "python.traceback", "traceback"),
        ("ValueError: bad", "exception.final", "exception"),
        ('Exception in thread "main" java.lang.X', "java.uncaught", "exception"),
        ("thread 'main' panicked at src/main.rs:2:5:", "rust.panic", "panic"),
        ("npm ERR! code E404", "npm.error", "error"),
        ("npm error code E404", "npm.error", "error"),
        ("ERROR: Could not find a version that satisfies x", "pip.error", "error"),
        ("error: subprocess-exited-with-error", "pip.error_code", "error"),
        ("make: *** [all] Error 2", "make.error", "error"),
    ],
)  # fmt: skip
def test_common_tool_diagnostics_are_recognized(
    line: str, rule: str, kind: str
) -> None:
    assert POLICY.recognize(line) == Recognition(rule, kind)
    assert POLICY.is_key_line(line)


@pytest.mark.parametrize(
    "line",
    [
        "Setting up liberror-perl (0.17029-2) ...",
        '  File "/usr/lib/python3.11/traceback.py", line 5, in <module>',
        "Unpacking python3-traceback2 ...",
        "src/error/mod.rs compiled",
        "tests/test_error.py::test_ok PASSED",
        "running with --fail-fast",
        "a non-fatal hiccup",
    ],
)
def test_joined_identifiers_are_no_key_lines(line: str) -> None:
    # Changed by issue 20: these matched the old built-in `\berror\b`-style words.
    assert not POLICY.is_key_line(line)


@pytest.mark.parametrize(
    "line",
    ["java.lang.OutOfMemoryError", "build error.", "Retrying... failed...",
     "error-", "ERROR: x", "fatal: not a git repository", "core dumped"],
)  # fmt: skip
def test_words_at_a_sentence_end_or_after_a_dot_stay_key(line: str) -> None:
    assert POLICY.is_key_line(line)


def test_a_recognizer_beats_the_words_and_the_first_rule_wins() -> None:
    line = "ERROR tests/test_db.py::test_q - ConnectionError: refused"
    assert POLICY.recognize(line) == Recognition("pytest.error", "error")
    assert POLICY.judge_key_line(line) == Recognition("pytest.error", "error")
    assert POLICY.judge_key_line("some error here") is True
    assert POLICY.judge_key_line("all good") is False


def test_disabled_rules_and_families_are_left_out() -> None:
    policy = SpillPolicy(disabled_recognizers=frozenset({"pytest.*", "lint.code"}))
    assert policy.recognize("FAILED a.py::t") is None
    assert policy.recognize("x.py:1:1: E501 long") is None
    assert not policy.is_key_line("x.py:1:1: E501 long")
    assert policy.recognize("FAIL: test_x (m.C)") is not None
    with pytest.raises(SpillPolicyError, match="disabled_recognizers: no rule 'nope'"):
        SpillPolicy(disabled_recognizers=frozenset({"nope"}))


def _rule(rule_id: str, pattern: str, **extra: object) -> RecognizerRule:
    return RecognizerRule(rule_id, "error", pattern, examples=("x",), **extra)  # type: ignore[arg-type]


def test_a_projects_rule_replaces_one_by_id_and_new_ones_come_first() -> None:
    own = (_rule("pytest.failed", r"^FAILED \S+::"), _rule("acme.any", r"^FAILED"))
    policy = SpillPolicy(recognizer_rules=own)
    assert policy.recognize("FAILED a.py::t") == Recognition("acme.any", "error")
    alone = SpillPolicy(recognizer_rules=own[:1])
    assert alone.recognize("FAILED a.py") is None  # the packaged pattern is gone
    assert alone.recognize("FAILED a.py::t") == Recognition("pytest.failed", "error")


def test_a_projects_bad_pattern_is_a_policy_error_naming_it() -> None:
    with pytest.raises(
        SpillPolicyError, match=r"recognizer 'acme\.x' pattern does not compile"
    ):
        SpillPolicy(recognizer_rules=(_rule("acme.x", "(a"),))
    with pytest.raises(
        SpillPolicyError, match=r"recognizer 'acme\.x' pattern holds a NUL"
    ):
        SpillPolicy(recognizer_rules=(_rule("acme.x", "a\x00"),))


# ------------------------------------------------------------ rule files


GOOD = """
family = "acme"
[[rules]]
id = "acme.boom"
kind = "error"
pattern = '^BOOM \\d+'
counts = 'BOOM (?P<booms>\\d+)'
examples = ["BOOM 3"]
counter_examples = ["BOOMER"]
[[fixtures]]
file = "run.txt"
expect = { "acme.boom" = [2] }
"""


DUPLICATE = (
    '[[rules]]\nid = "acme.boom"\nkind = "error"\npattern = "x"\nexamples = ["x"]\n'
)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('kind = "error"', 'kind = "oops"', "'kind' must be one of"),
        ('id = "acme.boom"', 'id = "Boom"', "'id' must be like"),
        ("counts = 'BOOM (?P<booms>\\d+)'", "counts = 'BOOM (\\d+)'", "must be named"),
        ("counts = 'BOOM (?P<booms>\\d+)'", "counts = '('", "no Python regex"),
        ('examples = ["BOOM 3"]', "examples = []", "'examples' must not be empty"),
        ("= [2] }", '= [2], "acme.no" = [1] }', "unknown rule"),
        ('expect = { "acme.boom" = [2] }', "expect = { }", "has no fixture line"),
        ("= [2] }", "= [0] }", "line numbers"),
        ('file = "run.txt"', 'file = "../run.txt"', "must stay under fixtures/"),
        ('family = "acme"', 'family = "acme"\ncolour = 1', "unknown key 'colour'"),
        ("pattern = ", "shade = 1\npattern = ", "unknown key 'shade'"),
        ("", DUPLICATE, "duplicate rule id"),
    ],
)  # fmt: skip
def test_a_malformed_rule_file_names_what_is_wrong(
    old: str, new: str, problem: str
) -> None:
    text = GOOD.replace(old, new, 1) if old else GOOD + new
    with pytest.raises(RecognizerRuleError, match=f"^acme.toml: .*{problem}"):
        load_rules_text(text, origin="acme.toml", read_fixture=lambda _: "")


def _project(tmp_path: Path, fixture: str) -> Path:
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "run.txt").write_text(fixture)
    (tmp_path / "acme.toml").write_text(GOOD)
    return tmp_path / "acme.toml"


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(list(argv))
    return status, out.getvalue()


def test_rules_check_passes_the_packaged_rules_and_a_good_project_file(
    tmp_path: Path,
) -> None:
    status, out = _cli("rules", "check")
    assert status == 0, out
    assert out.splitlines()[0] == "ok   pytest.failed"
    assert out.splitlines()[-1] == f"{len(packaged_rules())} passed, 0 failed"
    status, out = _cli("rules", "check", str(_project(tmp_path, "ok\nBOOM 1\n")))
    assert (status, out) == (0, "ok   acme.boom\n1 passed, 0 failed\n")


def test_rules_check_fails_on_a_fixture_mismatch(tmp_path: Path) -> None:
    path = _project(tmp_path, "BOOM 1\nBOOM 2\n")
    status, out = _cli("rules", "check", "--json", str(path))
    assert status == 1
    assert '"failed": 1' in out
    assert "wins lines [1, 2], expected [2]" in out


def test_a_policy_file_names_rule_files_relative_to_itself(tmp_path: Path) -> None:
    _project(tmp_path, "ok\nBOOM 1\n")
    policy_path = tmp_path / "policy.toml"
    policy_path.write_text(
        'recognizers = ["acme.toml"]\ndisabled_recognizers = ["make.error"]\n'
    )
    policy = load_policy_file(policy_path)
    assert policy.recognize("BOOM 7") == Recognition("acme.boom", "error")
    assert policy.recognize("make: *** [all] Error 2") is None
    with pytest.raises(SpillPolicyError, match="cannot write a policy's recognizer"):
        policy.to_toml()
    policy_path.write_text('recognizers = ["missing.toml"]\n')
    with pytest.raises(SpillPolicyError, match=r"recognizers\[0\] .*missing.toml"):
        load_policy_file(policy_path)
    with pytest.raises(SpillPolicyError, match="read by a policy file's loader"):
        SpillPolicy.from_toml('recognizers = ["acme.toml"]\n')


def test_disabled_recognizers_round_trip_through_toml() -> None:
    policy = SpillPolicy.from_toml('disabled_recognizers = ["go.*", "make.error"]\n')
    assert policy.disabled_recognizers == {"go.*", "make.error"}
    assert SpillPolicy.from_toml(policy.to_toml()) == policy


# ------------------------------------------------------------ kinds and facts

PYTEST_LOG = """\
collected 3 items
tests/test_x.py::test_a FAILED
Traceback (most recent call last):
ValueError: boom
=== 1 failed, 2 passed in 0.1s ===
rerun
FAILED tests/test_x.py::test_a - ValueError: boom
=== 2 failed, 1 passed, 1 warning in 0.2s ===
some error without a rule
"""


def test_a_scan_gives_each_recognized_key_line_its_kind_and_whole_output_facts() -> (
    None
):
    scan = scan_text(PYTEST_LOG, POLICY)
    assert [n for n, _ in scan.key_lines] == [2, 3, 4, 5, 7, 8, 9]
    assert scan.recognitions[2] == Recognition("pytest.failed", "failure")
    assert 9 not in scan.recognitions  # a key line by its words only
    assert dict(scan.facts.kinds) == {
        "exception": 1, "failure": 2, "summary": 2, "traceback": 1,
    }  # fmt: skip
    # The last summary line with counts gives the totals.
    assert dict(scan.facts.counts) == {"failed": 2, "passed": 1, "warnings": 1}
    assert scan.facts.counts_rule == "pytest.summary"
    scanner = KeyLineScanner(POLICY)
    scanner.feed(PYTEST_LOG.encode())
    assert scanner.scan() == scan


def test_facts_count_every_recognized_line_beyond_the_kept_ones() -> None:
    lines = [f"x.py:{n}:1: E501 long" if n % 3 == 0 else "ok" for n in range(1, 30_001)]
    text = "\n".join(lines) + "\n"
    policy = SpillPolicy(max_key_lines=2)
    scanner = KeyLineScanner(policy)
    data = text.encode()
    for start in range(0, len(data), 1 << 16):
        scanner.feed(data[start : start + (1 << 16)])
    scan = scanner.scan()
    assert len(scan.key_lines) == 8
    assert dict(scan.facts.kinds) == {"warning": 10_000}
    assert scan_text(text, policy).facts == scan.facts
    region = scan_region_facts(text, 0, len(text), 1, policy)
    assert region == scan_text(text, policy)


AT_THE_CUT = ["error[E1]: x", "ValueError", "x.py:1:2: E1"]
DIAGNOSTICS = [
    "FAILED tests/x.py::t - boom",
    "=== 1 failed, 2 passed in 0.1s ===",
    "Ran 3 tests in 0.1s",
    "FAILED (failures=2)",
    "x.py:12:5: E501 too long",
    "  --> src/main.rs:2:5",
    "error[E0308]: bad",
    "Traceback (most recent call last):",
    "ValueError: bad",
    "ok",
    "liberror-perl",
    "an error",
    "é error",
    "\x1b[31mFAILED\x1b[0m tests/x.py::t",
    "",
]


def reference_facts(
    text: str, policy: SpillPolicy
) -> tuple[Counter[str], dict[str, int]]:
    """Kinds and last counts by the letter: every line judged on its own."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    kinds: Counter[str] = Counter()
    counts: dict[str, int] = {}
    for line in lines:
        judged = clean_terminal(line)[: KEY_LINE_SCAN_CHARS + 1]
        recognition = policy.recognize(judged)
        if recognition is not None:
            kinds[recognition.kind] += 1
            found = policy.recognizers.counts(
                recognition.rule, judged[:KEY_LINE_SCAN_CHARS]
            )
            counts = found or counts
    return kinds, counts


@settings(max_examples=120, deadline=None)
@given(
    lines=st.lists(
        st.one_of(
            st.sampled_from(DIAGNOSTICS),
            # a diagnostic pushed towards the 500th character: the cut decides
            st.tuples(st.integers(480, 505), st.sampled_from(AT_THE_CUT))
            .map(lambda pad: "x" * pad[0] + " " + pad[1]),
            st.tuples(st.integers(480, 505), st.sampled_from(DIAGNOSTICS[:6]))
            .map(lambda pad: pad[1] + " " + "y" * pad[0]),
        ),
        max_size=60,
    ),
    cuts=st.lists(st.integers(1, 3000), max_size=6),
    max_key_lines=st.integers(0, 3),
    edge=st.sampled_from([0, 50, 4000]),
)  # fmt: skip
def test_the_scanner_and_a_text_scan_agree_on_facts_with_the_reference(
    lines: list[str], cuts: list[int], max_key_lines: int, edge: int
) -> None:
    text = "\n".join(lines)
    policy = SpillPolicy(max_key_lines=max_key_lines)
    kinds, counts = reference_facts(text, policy)
    data = text.encode()
    scanner = KeyLineScanner(policy, back_window=64, edge=edge)
    position = 0
    for cut in cuts:
        scanner.feed(data[position : position + cut])
        position += cut
    scanner.feed(data[position:])
    for scan in (scanner.scan(), scan_text(text, policy)):
        if not edge:
            assert scan.key_lines == reference_key_lines(text, policy)
        assert dict(scan.facts.kinds) == dict(kinds)
        assert dict(scan.facts.counts) == counts
        for number, recognition in scan.recognitions.items():
            judged = clean_terminal(text.split("\n")[number - 1])
            assert policy.recognize(judged[: KEY_LINE_SCAN_CHARS + 1]) == recognition


def test_the_screen_finds_every_packaged_example_in_a_block() -> None:
    rules = screen.screen_for(POLICY.recognizers.specs)
    for rule in packaged_rules():
        for example in rule.examples:
            if not example.isascii():
                continue
            data = b"noise\n" + example.encode() + b"\nnoise"
            hits: list[int] = []
            rules.each_hit(
                data, 0, len(data), lambda at, hits=hits: hits.append(at) is None
            )
            assert any(6 <= at <= 6 + len(example) for at in hits), (rule.id, example)
            offsets = rules.hit_offsets(data, 0, len(data))
            assert any(6 <= at <= 6 + len(example) for at in offsets), (
                rule.id,
                example,
            )
