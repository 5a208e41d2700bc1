"""`spillvault run`'s fast path reads and decides as the full CLI and the policy do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spillvault.adapters.cli.main import build_parser
from spillvault.adapters.cli.run_argv import parse_run
from spillvault.adapters.cli.run_gate import SHORT_BYTES
from spillvault.domain.enums import SizeUnit
from spillvault.domain.policy import SpillPolicy

if TYPE_CHECKING:
    import argparse

RUN_FIELDS = (
    "session",
    "json",
    "tool",
    "policy",
    "timeout",
    "tee",
    "fail_open",
    "command",
    "failure_status",
)


def full_parse(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


@pytest.mark.parametrize(
    "argv",
    [
        ["--"],
        ["--", "true"],
        ["--", "--json", "-h"],  # the command's own arguments
        ["--session", "claude-abc", "--fail-open", "--", "bash", "-lc", "make"],
        ["--json", "--session", "dir/s", "--tool", "read", "--", "ls", "-l"],
        ["--tee", "--no-tee", "--policy", "p.toml", "--", "x"],  # the last wins
        ["--session", "a", "--session", "", "--tee", "--", "x"],
    ],
)
def test_the_fast_reader_reads_what_the_full_parser_reads(argv: list[str]) -> None:
    fast = parse_run(argv)
    assert fast is not None
    full = full_parse(argv)
    assert {f: getattr(fast, f) for f in RUN_FIELDS} == {
        f: getattr(full, f) for f in RUN_FIELDS
    }


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["echo", "hi"],  # no `--`
        ["-h", "--", "x"],
        ["--help"],
        ["--bogus", "--", "true"],
        ["--fail", "--", "true"],  # an abbreviation
        ["--session=s", "--", "true"],
        ["--timeout", "5m", "--", "sleep", "1"],
        ["--session", "--json", "--", "x"],  # a value starting with `-`
        ["--session"],
    ],
)
def test_any_other_form_is_left_to_the_full_parser(argv: list[str]) -> None:
    assert parse_run(argv) is None


def test_short_bytes_are_under_every_limit_of_the_default_policy() -> None:
    """A byte decodes to one character at most, or to U+FFFD's three UTF-8 bytes."""
    policy = SpillPolicy()
    limits = [policy.default_limit, *policy.tool_limits.values()]
    assert len(limits) >= 2
    for limit in limits:
        worst = SHORT_BYTES * (3 if limit.unit == SizeUnit.BYTES else 1)
        assert worst <= limit.limit, limit
    invalid = b"\xff" * SHORT_BYTES
    text = invalid.decode("utf-8", "replace")
    for limit in limits:
        assert policy.measure(text, limit.unit) <= limit.limit
