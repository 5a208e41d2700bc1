"""Secret redaction (issue 20): the rules, masks, cuts and the planted corpus."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.redaction import (
    CUT_REACH,
    Edge,
    Redactor,
    SecretRules,
    entropy,
    packaged_rules,
)
from spillvault.specs.secret_rules import (
    SecretRuleError,
    load_secret_rules,
    parse_secret_rules,
)
from tests.support.secret_corpus import KINDS, fake_secret, planted

KEY = b"k" * 32
_MASK = re.compile(r"\[REDACTED [a-z0-9-]+ #[0-9a-f]{4}\]")


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor(KEY)


RULES = load_secret_rules()


@pytest.mark.parametrize("rule", RULES, ids=[rule.id for rule in RULES])
def test_every_rule_masks_its_examples_and_spares_its_counterexamples(rule) -> None:
    only = Redactor(KEY, SecretRules([rule]))
    assert rule.examples, f"{rule.id} has no examples"
    for example in rule.examples:
        shown = only.redact(example)
        assert f"[REDACTED {rule.id} #" in shown, example
        assert shown.count("\n") == example.count("\n")
    for counter in rule.counterexamples:
        assert only.redact(counter) == counter


def test_the_rule_set_covers_the_kinds_the_issue_names() -> None:
    ids = {rule.id for rule in RULES}
    named = {
        "aws-access-key-id",
        "aws-secret-key",
        "gcp-private-key-id",
        "gcp-api-key",
        "azure-storage-key",
        "github-token",
        "gitlab-token",
        "slack-token",
        "stripe-key",
        "openai-api-key",
        "anthropic-api-key",
        "private-key",
        "jwt",
        "authorization-header",
        "url-password",
        "secret-assignment",
    }
    assert named <= ids


def test_the_planted_corpus_is_masked_at_least_95_percent(redactor) -> None:
    plants = planted()
    assert {plant.kind for plant in plants} == set(KINDS)
    leaked = [p.kind for p in plants if p.secret in redactor.redact(p.text)]
    assert len(leaked) <= len(plants) * 0.05, leaked


def test_a_mask_keeps_the_kind_and_a_keyed_tag(redactor) -> None:
    secret, line = fake_secret("github-token", 1)
    shown = redactor.redact(line + " and again " + secret)
    masks = _MASK.findall(shown)
    assert len(masks) == 2
    assert masks[0] == masks[1]
    assert masks[0].startswith("[REDACTED github-token #")
    other = Redactor(b"o" * 32).redact(line)
    assert other != redactor.redact(line)  # another key, another tag
    second, _ = fake_secret("github-token", 2)
    assert redactor.mask("github-token", secret) != redactor.mask(
        "github-token", second
    )


def test_a_private_key_keeps_every_newline_and_its_armour(redactor) -> None:
    secret, block = fake_secret("private-key", 3)
    shown = redactor.redact("before\n" + block + "\nafter")
    assert secret not in shown
    assert shown.count("\n") == block.count("\n") + 2
    assert "-----BEGIN RSA PRIVATE KEY-----" in shown
    assert "-----END RSA PRIVATE KEY-----" in shown


def test_no_secret_leaves_the_text_itself(redactor) -> None:
    text = "all fine: 1742 tests passed, PASSWORD_MIN_LENGTH=8, token=None"
    assert redactor.redact(text) is text


def test_a_cut_mid_line_masks_the_run_it_split(redactor) -> None:
    secret, line = fake_secret("github-token", 4)
    cut = line.index(secret) + 10
    head = redactor.redact(line[:cut], end=Edge.MID)
    assert secret[:10] not in head
    tail = redactor.redact(line[cut:], start=Edge.MID)
    assert secret[10:] not in tail
    assert redactor.redact(line[:cut]) == line[:cut]  # no cut said: nothing to mask


def test_a_value_whose_key_was_cut_off_is_masked(redactor) -> None:
    text = 'password = "Zx8Kq2Lm7Np3Rs9T" and more words far away from the cut'
    cut = text.index("=")
    shown = redactor.redact(text[cut:], start=Edge.MID)
    assert "Zx8Kq2Lm7Np3Rs9T" not in shown
    assert "away" in shown  # runs past the reach stay
    assert len(text) - cut > CUT_REACH


def test_a_block_cut_open_is_masked_to_the_cut(redactor) -> None:
    _secret, block = fake_secret("private-key", 5)
    lines = block.split("\n")
    middle = len(lines) // 2
    first = "\n".join(lines[:middle])
    second = "\n".join(lines[middle:])
    assert all(
        line not in redactor.redact(first, end=Edge.LINE) for line in lines[1:middle]
    )
    shown = redactor.redact(second, start=Edge.LINE)
    assert all(line not in shown for line in lines[middle:-1])
    assert redactor.ends_inside_block(first)
    assert not redactor.ends_inside_block(block)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_redaction_never_adds_or_removes_a_newline(text: str) -> None:
    shown = Redactor(KEY).redact(text, start=Edge.MID, end=Edge.MID)
    assert shown.count("\n") == text.count("\n")


def test_entropy_is_bits_per_character() -> None:
    assert entropy("") == 0
    assert entropy("aaaa") == 0
    assert entropy("abcd") == pytest.approx(2.0)


def test_bad_rules_are_named() -> None:
    with pytest.raises(SecretRuleError, match="x-rule: match is not a valid regex"):
        parse_secret_rules("[[rules]]\nid = 'x-rule'\nprobe = 'a'\nmatch = '('\n")
    with pytest.raises(SecretRuleError, match="probe is required"):
        parse_secret_rules("[[rules]]\nid = 'x-rule'\nmatch = 'a'\n")
    with pytest.raises(SecretRuleError, match="unknown key 'colour'"):
        parse_secret_rules(
            "[[rules]]\nid = 'x-rule'\nprobe = 'a'\nmatch = 'a'\ncolour = 1\n"
        )
    rule = "[[rules]]\nid = 'x-rule'\nprobe = 'a'\nmatch = 'a'\n"
    with pytest.raises(SecretRuleError, match="appears twice"):
        parse_secret_rules(rule + rule)
    with pytest.raises(SecretRuleError, match="min_entropy"):
        parse_secret_rules(
            "[[rules]]\nid='x-rule'\nprobe='a'\nmatch='a'\nmin_entropy=9\n"
        )


def test_a_probe_hyperscan_refuses_is_a_policy_error() -> None:
    (rule,) = parse_secret_rules(
        "[[rules]]\nid = 'x-rule'\nprobe = '(?<=a)b'\nmatch = 'b'\n"
    )
    with pytest.raises(SpillPolicyError, match="do not compile for Hyperscan"):
        SecretRules([rule])


def test_a_short_key_is_refused() -> None:
    with pytest.raises(SpillPolicyError, match="at least 16 bytes"):
        Redactor(b"short")


def test_the_packaged_rules_compile_once() -> None:
    assert packaged_rules() is packaged_rules()


def test_short_words_and_low_entropy_runs_at_a_cut_stay(redactor) -> None:
    assert redactor.redact("beta", end=Edge.MID) == "beta"
    assert redactor.redact("L" * 159, end=Edge.MID) == "L" * 159
    assert redactor.redact("token Zx8K", end=Edge.MID).startswith(
        "token [REDACTED cut #"
    )
    assert redactor.redact("run abcdefghij", end=Edge.MID) != "run abcdefghij"
