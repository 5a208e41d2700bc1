"""Claude Code's Bash permission rules, matched against the command as written.

Claude Code checks its rules against the command it will run, so after a
rewrite `Bash(npm test:*)` no longer matches `spillvault run … npm test`:
the user would be asked where they were not, or, worse, an "allow" from the
hook would skip a prompt they would have seen. The hook therefore reads the
user's own rules and matches them against the original command: a deny or
ask rule leaves the command alone; an allow rule lets the hook answer
"allow", which skips only a prompt the user had already waived.

Rules: `Bash(npm test)` is the exact command, `Bash(npm run:*)` and
`Bash(git *)` a prefix or a glob; a compound command (`a && b`, `a | b`) is
allowed only when every part is.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

Verdict = Literal["deny", "ask", "allow", "none"]
_RULE: Final = re.compile(r"Bash\((?P<body>.*)\)\Z", re.DOTALL)
_PARTS: Final = re.compile(r"\s*(?:&&|\|\||;|\||\n)\s*")


def settings_files(home: Path, project: Path) -> list[Path]:
    """Return the settings files whose rules apply, most general first."""
    return [
        home / ".claude" / "settings.json",
        project / ".claude" / "settings.json",
        project / ".claude" / "settings.local.json",
    ]


def load_rules(files: Iterable[Path]) -> dict[str, list[str]]:
    """Return the Bash rule bodies under deny, ask and allow, from every file."""
    rules: dict[str, list[str]] = {"deny": [], "ask": [], "allow": []}
    for path in files:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # an unreadable file gives no rules; Claude Code decides as ever
        permissions = data.get("permissions") if isinstance(data, dict) else None
        if not isinstance(permissions, dict):
            continue
        for kind, bodies in rules.items():
            listed = permissions.get(kind)
            if isinstance(listed, list):
                bodies.extend(_bodies(listed))
    return rules


def _bodies(listed: list[object]) -> list[str]:
    out = []
    for rule in listed:
        match = _RULE.match(rule) if isinstance(rule, str) else None
        if match is not None:
            out.append(match["body"])
    return out


def verdict(command: str, rules: Mapping[str, list[str]]) -> Verdict:
    """Return what the user's rules say of `command`: deny, ask, allow or none."""
    parts = [part for part in _PARTS.split(command.strip()) if part]
    if not parts:
        return "none"
    kinds: tuple[Literal["deny", "ask"], ...] = ("deny", "ask")
    for kind in kinds:
        if any(_matches(part, body) for part in parts for body in rules.get(kind, [])):
            return kind
    allowed = rules.get("allow", [])
    if all(any(_matches(part, body) for body in allowed) for part in parts):
        return "allow"
    return "none"


def _matches(command: str, body: str) -> bool:
    """Tell whether one rule body covers one simple command."""
    if body in {"", "*"}:
        return True
    if body.endswith(":*"):
        prefix = body[:-2]
        return command == prefix or command.startswith(prefix + " ")
    if "*" in body:
        # Only `*` is special in a rule: any run of characters.
        pattern = ".*".join(re.escape(piece) for piece in body.split("*"))
        return re.fullmatch(pattern, command, re.DOTALL) is not None
    return command == body


__all__ = ["Verdict", "load_rules", "settings_files", "verdict"]
