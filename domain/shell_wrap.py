"""Whether a coding agent's shell command may run under `spillvault run`, and how.

A hook rewrites `CMD` to `spillvault run --session S -- SHELL -lc 'CMD'`, so
spillvault sees the whole output and the exit status. The rewrite runs CMD
in a child shell, which is only sound when CMD changes nothing the agent's
own shell keeps and needs no terminal. Refused, with the reason:

- a command already under spillvault (never wrap twice), or empty;
- a state change at any command position: `cd`, `export`, `source`, a bare
  `NAME=value`, `alias`, `set`, ... (the agent's shell must see it);
- a heredoc (`<<`): the hooks' JSON carries it, but a rewrite would have to
  re-quote a body whose end is a line of its own;
- a background run (`&`, `nohup`, `disown`, `setsid`): the output would
  outlive the wrapper;
- an interactive program (editors, pagers, REPLs, `top`, `git rebase -i`):
  it needs a terminal the wrapper does not give;
- a command that does not parse as shell words (an unclosed quote).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Final

STATE_BUILTINS: Final = frozenset(
    {
        ".", "alias", "bg", "bind", "builtin", "cd", "declare", "dirs", "disown",
        "enable", "eval", "exec", "exit", "export", "fg", "hash", "history", "jobs",
        "local", "logout", "popd", "pushd", "read", "readonly", "rehash", "set",
        "setopt", "shopt", "source", "trap", "typeset", "ulimit", "umask", "unalias",
        "unset", "unsetopt", "wait",
    }
)  # fmt: skip
BACKGROUND: Final = frozenset({"nohup", "disown", "setsid"})
INTERACTIVE: Final = frozenset(
    {
        "vi", "vim", "nvim", "view", "nano", "pico", "emacs", "ed", "less", "more",
        "most", "man", "top", "htop", "btop", "watch", "tmux", "screen", "ssh",
        "telnet", "ftp", "sftp", "mc", "ranger", "fzf",
    }
)  # fmt: skip
REPLS: Final = frozenset(
    {
        "python", "python3", "ipython", "node", "deno", "irb", "ghci", "lua",
        "bash", "zsh", "sh", "fish", "R", "julia", "scala", "clojure",
    }
)  # fmt: skip
# Database shells take arguments and still wait for a terminal, unless told what to run.
DATABASE_SHELLS: Final = frozenset({"psql", "mysql", "sqlite3", "redis-cli", "mongosh"})
_RUN_FLAGS: Final = frozenset(
    {"-c", "-e", "-f", "--command", "--execute", "--file", "--eval"}
)
SHELLS: Final = frozenset({"bash", "zsh"})
# Operator characters: after a run of them, the next word is a command name.
_PUNCTUATION: Final = ";&|(){}\n"
_SEPARATORS: Final = frozenset({";", "&"})
_REDIRECT: Final = re.compile(r"[0-9]*[<>]&[0-9-]*|&>>?")
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_INTERACTIVE_GIT: Final = (
    ("rebase", "-i"), ("rebase", "--interactive"), ("add", "-p"), ("add", "-i"),
    ("add", "--patch"), ("add", "--interactive"),
)  # fmt: skip


_REFUSED_NAMES: Final = (
    (frozenset({"spillvault"}), "already under spillvault"),
    (STATE_BUILTINS, "changes the shell's state"),
    (BACKGROUND, "background run"),
    (INTERACTIVE, "interactive"),
)


@dataclass(frozen=True)
class ShellWrap:
    """A decision: the command to run instead, or why the original stays."""

    command: str | None
    reason: str

    @property
    def wrapped(self) -> bool:
        """Tell whether the command was rewritten."""
        return self.command is not None


def wrap_shell_command(
    command: str, *, spillvault: str, session: str, shell: str = "bash"
) -> ShellWrap:
    """Return how to run `command` under `spillvault run`, or why not to."""
    if not command.strip():
        return ShellWrap(None, "empty command")
    refusal = _refusal(command)
    if refusal is not None:
        return ShellWrap(None, refusal)
    shell_name = shell if shell in SHELLS else "bash"
    wrapped = shlex.join(
        [spillvault, "run", "--session", session, "--fail-open", "--",
         shell_name, "-lc", command]
    )  # fmt: skip
    return ShellWrap(wrapped, "wrapped")


def _refusal(command: str) -> str | None:
    """Return why `command` must run as it is, or None when it may be wrapped."""
    if "<<" in command.replace("<<<", ""):
        return "heredoc"
    try:
        words = _words(command)
    except ValueError as error:
        return f"does not parse as shell words ({error})"
    for index, (word, position) in enumerate(words):
        if not position:
            continue
        rest = [w for w, _ in words[index + 1 :]]
        why = _command_refusal(word, rest)
        if why is not None:
            return why
    if any(word == "&" for word, _ in words):
        return "background run (&)"
    return None


def _command_refusal(word: str, rest: list[str]) -> str | None:
    """Return why the command named `word` (followed by `rest`) must not be wrapped."""
    name = word.rsplit("/", 1)[-1]
    arguments = _until_separator(rest)
    if _ASSIGNMENT.match(word):
        return None if arguments else "changes the shell's state (an assignment)"
    for names, why in _REFUSED_NAMES:
        if name in names:
            return f"{why} ({name})"
    return _interactive_use(name, arguments)


def _interactive_use(name: str, arguments: list[str]) -> str | None:
    """Return why a program waits for a terminal as called, else None."""
    operands = [a for a in arguments if not a.startswith("-")]
    if name in REPLS and not operands:
        return f"interactive ({name} with no script or command)"
    if name in DATABASE_SHELLS and not _RUN_FLAGS & set(arguments):
        return f"interactive ({name} with nothing to run)"
    if name == "git" and any(
        sub in arguments and flag in arguments for sub, flag in _INTERACTIVE_GIT
    ):
        return "interactive (git, a terminal editor)"
    return None


def _until_separator(words: list[str]) -> list[str]:
    """Return the words up to the next command separator."""
    out = []
    for word in words:
        if word in _SEPARATORS:
            break
        out.append(word)
    return out


def _words(command: str) -> list[tuple[str, bool]]:
    r"""Split `command` into shell words, each marked when it is in command position.

    Operators are their own tokens; a run of them (`;\n`, `&&`) is one. An
    assignment before a command keeps the command position for the next
    word (`FOO=1 make`). Redirections with `&` (`2>&1`, `&>f`) are set aside
    first, so only a real `&` reads as a background run.
    """
    text = _REDIRECT.sub(" ", command)
    lexer = shlex.shlex(text, posix=True, punctuation_chars=_PUNCTUATION)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    out: list[tuple[str, bool]] = []
    expect_command = True
    for token in lexer:
        if set(token) <= set(_PUNCTUATION):
            out.append((_operator(token), False))
            expect_command = True
            continue
        out.append((token, expect_command))
        if not (expect_command and _ASSIGNMENT.match(token)):
            expect_command = False
    return out


def _operator(token: str) -> str:
    """Name a run of operator characters: `&` when it holds a lone `&`."""
    rest = token.replace("&&", "").replace("|&", "")
    return "&" if "&" in rest else ";"


__all__ = ["ShellWrap", "wrap_shell_command"]
