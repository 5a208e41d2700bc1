"""`spillvault rules check [FILE...]`: run recognizer rules on their fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from spillvault.adapters.cli.output import emit

if TYPE_CHECKING:
    import argparse

    from spillvault.specs.recognizer_rules import RecognizerRule, RuleFile


def load_rule_file(path: str | Path, *, fixtures: bool = True) -> RuleFile:
    """Read a rule file; its fixtures live in `fixtures/` beside it."""
    from spillvault.specs.recognizer_rules import (  # noqa: PLC0415 - only this command needs it
        RecognizerRuleError,
        load_rules_text,
    )

    path = Path(path)
    folder = path.parent / "fixtures"

    def read(name: str) -> str:
        return (folder / name).read_text("utf-8")

    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        msg = f"{path}: cannot read: {error}"
        raise RecognizerRuleError(msg) from error
    return load_rules_text(
        text, origin=str(path), read_fixture=read if fixtures else None
    )


def rule_file_rules(path: str | Path) -> tuple[RecognizerRule, ...]:
    """Return a rule file's rules (its fixtures are checked, not read)."""
    return load_rule_file(path, fixtures=False).rules


def rules_check_command(args: argparse.Namespace) -> int:
    """Print each rule's verdict; exit 1 when any rule fails its checks."""
    from spillvault.domain.policy import SpillPolicy  # noqa: PLC0415
    from spillvault.domain.recognizer_check import check_rule_file  # noqa: PLC0415
    from spillvault.specs.recognizer_rules import load_packaged_rules  # noqa: PLC0415

    if args.files:
        files = tuple(load_rule_file(path) for path in args.files)
        own = tuple(rule for file in files for rule in file.rules)
        policy = SpillPolicy(recognizer_rules=own)
    else:
        files, policy = load_packaged_rules(), SpillPolicy()
    lines, results = [], []
    for file in files:
        for check in check_rule_file(file, policy):
            verdict = "ok  " if check.passed else "FAIL"
            lines.append(f"{verdict} {check.rule}")
            lines += [f"     {problem}" for problem in check.problems]
            results.append(
                {
                    "rule": check.rule,
                    "origin": file.origin,
                    "passed": check.passed,
                    "problems": list(check.problems),
                }
            )
    failed = sum(not result["passed"] for result in results)
    lines.append(f"{len(results) - failed} passed, {failed} failed")
    data: dict[str, Any] = {"rules": results, "failed": failed}
    emit(args, "\n".join(lines), data)
    return 1 if failed else 0


def add_rules_command(commands: Any) -> None:
    """Register `rules check` with the CLI's subcommands."""
    rules = commands.add_parser("rules", help="check the key-line recognizer rules")
    rules_commands = rules.add_subparsers(dest="rules_command", required=True)
    check = rules_commands.add_parser(
        "check",
        help="run each rule on its examples and fixtures; exit 1 on a mismatch",
    )
    check.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="a project's rule files (default: the packaged rules)",
    )
    check.add_argument("--json", action="store_true", help="one JSON object")
    check.set_defaults(handler=rules_check_command)
