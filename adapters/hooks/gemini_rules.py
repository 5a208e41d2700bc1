"""What Gemini CLI judges by a shell command as written, so the hook leaves it so.

Gemini checks its policy rules and its own shell heuristics against the
command it is about to run. Wrapped, `make` becomes `spillvault run … bash
-lc 'make'`: a deny rule for `git push` no longer matches, an allow list no
longer covers it, and the heuristics see only `spillvault`. A command that
any policy rule or heuristic could judge is therefore left as written (its
output is gated after it ran). The heuristics are ported from
`sandbox/utils/commandSafety.ts`, the rule patterns from the policy engine,
as published in @google/gemini-cli 0.61.0.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

SHELL_TOOLS: Final = frozenset({"run_shell_command", "ShellTool"})
"""The names Gemini's policy rules give the shell tool."""

# Gemini's shell heuristics (sandbox/utils/commandSafety.ts): commands it runs
# unasked when read-only, and the forms of some it always asks for.
KNOWN_SAFE: Final = frozenset(
    {
        "__read", "__write", "cat", "cd", "cut", "echo", "expr", "false", "grep",
        "head", "id", "ls", "nl", "paste", "pwd", "rev", "seq", "stat", "tail",
        "tr", "true", "uname", "uniq", "wc", "which", "whoami", "numfmt", "tac",
        "base64", "find", "rg", "git", "sed", "bash", "zsh", "sh",
    }
)  # fmt: skip
_FIND_UNSAFE: Final = frozenset(
    {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint",
     "-fprint0", "-fprintf"}
)  # fmt: skip
_GIT_UNSAFE: Final = frozenset(
    {"--output", "--ext-diff", "--textconv", "--exec", "--paginate"}
)
_GIT_READ_ONLY: Final = frozenset(
    {"--list", "-l", "--show-current", "-a", "--all", "-r", "--remotes", "-v",
     "-vv", "--verbose"}
)  # fmt: skip
_GIT_VALUE_OPTIONS: Final = frozenset(
    {"-C", "-c", "--config-env", "--exec-path", "--git-dir", "--namespace",
     "--super-prefix", "--work-tree"}
)  # fmt: skip
_OPERATOR: Final = re.compile(r"[;&|\n]+")
_PARTS: Final = re.compile(r"\|\||&&|\$\(|[;&|\n()`{}]")
_SHELL_WRAPPER: Final = re.compile(r"^\s*(?:\S+/)?(?:sh|bash|zsh)\s+-c\s+")
_SHELL_RULE: Final = re.compile(r"^(?:run_shell_command|ShellTool)\((.*)\)$", re.DOTALL)


def _tokens(command: str) -> list[str]:
    """Split `command` into words and operator runs, as shell-quote does."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    return list(lexer)


def judged_by_heuristics(command: str) -> bool:
    """Tell whether Gemini's shell heuristics would judge `command` by its words.

    They read the whole command's words: a read-only one alone runs unasked
    in the default mode, a dangerous one is always asked for. Either way a
    wrapper (`spillvault run …`) would be judged in its place.
    """
    try:
        words = _tokens(command)
    except ValueError:
        return False  # the wrapper refuses it too
    if not words:
        return False
    alone = not any(_OPERATOR.fullmatch(word) for word in words)
    return _dangerous(words) or (alone and os.path.basename(words[0]) in KNOWN_SAFE)


def _dangerous(args: list[str]) -> bool:
    """Gemini's `isDangerousCommand` (sandbox/utils/commandSafety.ts, 0.61.0)."""
    if not args:
        return False
    command, rest = os.path.basename(args[0]), args[1:]
    if command == "sudo":
        return _dangerous(rest)
    judge = _DANGER.get(command)
    return judge is not None and judge(rest)


def _symbolic(arg: str) -> bool:
    return arg in {"-s", "--symbolic"} or (
        arg[:1] == "-" and arg[:2] != "--" and "s" in arg
    )


def _rg_unsafe(arg: str) -> bool:
    return arg in {"--search-zip", "-z"} or arg.split("=", 1)[0] in {
        "--pre",
        "--hostname-bin",
    }


def _base64_unsafe(arg: str) -> bool:
    return arg == "--output" or arg.startswith(("--output=", "-o"))


def _git_dangerous(rest: list[str]) -> bool:
    if any(a in {"-c", "--config-env"} or a.startswith(("-c", "--config-env="))
           for a in rest):  # fmt: skip
        return True
    skip = False
    for index, arg in enumerate(rest):
        if skip:
            skip = False
            continue
        if arg in _GIT_VALUE_OPTIONS:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        after = rest[index + 1 :]
        unsafe = any(
            a in _GIT_UNSAFE or a.startswith(("--output=", "--exec=")) for a in after
        )
        if arg in {"status", "log", "diff", "show"}:
            return unsafe
        if arg == "branch":
            read_only = all(a in _GIT_READ_ONLY or a.startswith("--format=")
                            for a in after)  # fmt: skip
            return unsafe or not read_only
        return False
    return False


_DANGER: Final[dict[str, Callable[[list[str]], bool]]] = {
    "rm": lambda rest: bool(rest) and rest[0] in {"-f", "-rf", "-fr"},
    "ln": lambda rest: any(_symbolic(a) for a in rest),
    "find": lambda rest: any(a in _FIND_UNSAFE for a in rest),
    "rg": lambda rest: any(_rg_unsafe(a) for a in rest),
    "base64": lambda rest: any(_base64_unsafe(a) for a in rest),
    "git": _git_dangerous,
}


def named_by_policy(
    original: dict[str, Any],
    wrapped: dict[str, Any],
    project: Path,
    environ: Mapping[str, str],
) -> bool:
    """Tell whether a user's policy rule names the command, as written or wrapped.

    Rules are read where Gemini reads them: policy TOML files (system, user,
    workspace, `policyPaths`) and `tools.allowed`/`core`/`exclude` entries of
    the settings files. A rule or file that cannot be read counts as naming it.
    """
    try:
        patterns = list(_shell_patterns(project, environ))
    except (OSError, ValueError):
        return True
    if not patterns:
        return False
    command = str(original["command"])
    parts = {command, *(p.strip() for p in _PARTS.split(command) if p.strip())}
    parts |= {_SHELL_WRAPPER.sub("", p).strip("'\"") for p in parts}
    texts = [_stable(wrapped), *(_stable({**original, "command": p}) for p in parts)]
    for pattern in patterns:
        try:
            compiled = re.compile(pattern)
        except re.error:
            return True
        if any(compiled.search(text) for text in texts):
            return True
    return False


def _shell_patterns(project: Path, environ: Mapping[str, str]) -> Iterator[str]:
    """Yield the argument patterns of every rule that may judge a shell command."""
    gemini = gemini_dir(environ)
    system = _system_dir()
    system_settings = environ.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or str(
        system / "settings.json"
    )
    policy_paths = [system / "policies", gemini / "policies",
                    project / ".gemini" / "policies"]  # fmt: skip
    for settings in (Path(system_settings), gemini / "settings.json",
                     project / ".gemini" / "settings.json"):  # fmt: skip
        data = json_file(settings)
        tools = data.get("tools")
        tools = tools if isinstance(tools, dict) else {}
        for key in ("allowed", "core", "exclude"):
            for entry in _list(tools.get(key)):
                match = _SHELL_RULE.match(entry) if isinstance(entry, str) else None
                if match:
                    yield from _rule_patterns({"commandPrefix": match[1]})
        for key in ("policyPaths", "adminPolicyPaths"):
            policy_paths += [
                Path(p) for p in _list(data.get(key)) if isinstance(p, str)
            ]
    for rule in _policy_rules(policy_paths):
        if _may_name_shell(rule):
            yield from _rule_patterns(rule)


def _policy_rules(paths: list[Path]) -> Iterator[dict[str, Any]]:
    import tomllib  # noqa: PLC0415 - only when a shell command may be wrapped

    for path in paths:
        files = sorted(path.glob("*.toml")) if path.is_dir() else [path]
        for file in files:
            if not file.is_file():
                continue
            data = tomllib.loads(file.read_text(encoding="utf-8"))
            yield from (r for r in _list(data.get("rule")) if isinstance(r, dict))


def _may_name_shell(rule: dict[str, Any]) -> bool:
    """Tell whether a rule carries argument patterns that may meet the shell tool."""
    if not any(k in rule for k in ("commandPrefix", "commandRegex", "argsPattern")):
        return False  # a rule for the whole tool judges both commands alike
    names = rule.get("toolName")
    names = names if isinstance(names, list) else [names]
    return any(
        n is None or (isinstance(n, str) and (n in SHELL_TOOLS or "*" in n))
        for n in names
    )


def _rule_patterns(rule: dict[str, Any]) -> Iterator[str]:
    """Gemini's `buildArgsPatterns`: what a rule's regular expressions are."""
    prefix = rule.get("commandPrefix")
    if prefix is not None:
        for one in prefix if isinstance(prefix, list) else [prefix]:
            encoded = json.dumps(str(one), ensure_ascii=False)[:-1]
            yield re.escape(f'"command":{encoded}') + r'(?:[\s"]|\\")'
    elif rule.get("commandRegex") is not None:
        yield f'"command":"{rule["commandRegex"]}'
    elif rule.get("argsPattern") is not None:
        yield str(rule["argsPattern"])


def _stable(args: Mapping[str, Any]) -> str:
    """Gemini's `stableStringify` of tool arguments: sorted, top-level pairs in NULs."""
    pairs = (
        "\0" + json.dumps(key, ensure_ascii=False) + ":"
        + json.dumps(args[key], ensure_ascii=False, sort_keys=True,
                     separators=(",", ":")) + "\0"
        for key in sorted(args)
        if args[key] is not None
    )  # fmt: skip
    return "{" + ",".join(pairs) + "}"


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def json_file(path: Path) -> dict[str, Any]:
    """Return a JSON file's object; a missing or empty file is `{}`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    data = json.loads(text) if text.strip() else {}
    return data if isinstance(data, dict) else {}


def gemini_dir(environ: Mapping[str, str]) -> Path:
    """Gemini's global directory: `~/.gemini`, its home overridable."""
    home = environ.get("GEMINI_CLI_HOME") or environ.get("HOME") or str(Path.home())
    return Path(home) / ".gemini"


def runtime_dir(environ: Mapping[str, str]) -> Path:
    """Where Gemini keeps `tmp/` and `projects.json`: `~/.gemini` unless sandboxed."""
    if environ.get("SANDBOX") == "sandbox-exec":
        return gemini_dir(environ).parent / ".cache" / ".gemini"
    return gemini_dir(environ)


def _system_dir() -> Path:
    if sys.platform == "darwin":
        return Path("/Library/Application Support/GeminiCli")
    return Path("/etc/gemini-cli")


__all__ = [
    "SHELL_TOOLS",
    "gemini_dir",
    "json_file",
    "judged_by_heuristics",
    "named_by_policy",
    "runtime_dir",
]
