"""Which agent shell commands run under `spillvault run`; the rewrite is exact."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spillvault.domain.shell_wrap import (
    BACKGROUND,
    INTERACTIVE,
    STATE_BUILTINS,
    wrap_shell_command,
)


def _wrap(command: str, login_shell: str = "bash") -> str | None:
    return wrap_shell_command(
        command, spillvault="/opt/bin/spillvault", session="cc-1", shell=login_shell
    ).command


@pytest.mark.parametrize(
    "command",
    [
        "make test",
        "pytest -x 2>&1 | tail -50",
        "FOO=1 BAR=2 make all",
        "grep -rn 'cd x' src",
        "npm test &> build.log; cat build.log",
        "python -c 'print(1)'",
        "git log --stat -n 500",
        "find . -name '*.py' | xargs wc -l",
        'echo "a && export b"',
        "grep -c x <<< 'abc'",
        'for f in *.txt; do wc -l "$f"; done',
    ],
)
def test_commands_that_change_nothing_are_wrapped(command: str) -> None:
    """The rewrite runs the very command text in a login shell under spillvault."""
    wrapped = _wrap(command)
    assert wrapped is not None
    assert shlex.split(wrapped) == [
        "/opt/bin/spillvault", "run", "--session", "cc-1", "--fail-open", "--",
        "bash", "-lc", command,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("cd src && make", "cd"),
        ("make && cd ..", "cd"),
        ("export PATH=/x:$PATH", "export"),
        ("source .venv/bin/activate", "source"),
        (". ./env.sh", "(.)"),
        ("FOO=1", "assignment"),
        ("x=$(ls)", "assignment"),
        ("cat <<EOF\nhello\nEOF", "heredoc"),
        ("sleep 100 &", "background"),
        ("nohup ./server", "nohup"),
        ("vim notes.txt", "vim"),
        ("git diff | less", "less"),
        ("python3", "python3"),
        ("psql -U me", "psql"),
        ("git rebase -i HEAD~3", "git"),
        ("spillvault run -- make", "already"),
        ("/usr/local/bin/spillvault read s/1", "already"),
        ("echo 'unclosed", "parse"),
    ],
)
def test_commands_the_agents_shell_must_see_run_as_they_are(
    command: str, reason: str
) -> None:
    """State changes, heredocs, background runs and terminals are never wrapped."""
    decision = wrap_shell_command(command, spillvault="spillvault", session="s")
    assert decision.command is None
    assert reason in decision.reason


@given(
    st.sampled_from(sorted(STATE_BUILTINS | BACKGROUND | INTERACTIVE)),
    st.sampled_from(["", "ls; ", "make && ", "true || ", "echo a | "]),
    st.sampled_from(["", " x", " -q y"]),
)
def test_a_refused_command_anywhere_in_a_list_refuses_the_list(
    name: str, before: str, after: str
) -> None:
    """Wherever the command stands in a list or pipeline, the whole stays as it is."""
    assert _wrap(f"{before}{name}{after}") is None


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80))
def test_a_wrapped_command_is_passed_on_exactly(command: str) -> None:
    """Whatever the text, a rewrite hands the shell the original, unaltered."""
    wrapped = _wrap(command)
    if wrapped is not None:
        assert shlex.split(wrapped)[-1] == command
        assert _wrap(wrapped) is None  # never twice


def test_the_shell_is_the_users_when_it_is_bash_or_zsh() -> None:
    """zsh users keep zsh; anything else runs bash."""
    assert shlex.split(_wrap("ls", login_shell="zsh") or "")[-3] == "zsh"
    assert shlex.split(_wrap("ls", login_shell="fish") or "")[-3] == "bash"
