"""Load a spill policy from a TOML file (the domain parses text only)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.policy import SpillPolicy, TokenCounter

if TYPE_CHECKING:
    from os import PathLike

    from spillvault.specs.recognizer_rules import RecognizerRule


def load_policy_file(
    path: str | PathLike[str], *, token_counter: TokenCounter | None = None
) -> SpillPolicy:
    """Read a TOML policy file; any problem is a SpillPolicyError naming it.

    Its `recognizers` entries are rule files, relative to the policy file.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"invalid spill policy: cannot read {path!s}: {exc}"
        raise SpillPolicyError(msg) from exc
    folder = Path(path).parent

    def rules_of(name: str) -> tuple[RecognizerRule, ...]:
        from spillvault.adapters.cli.rules import rule_file_rules  # noqa: PLC0415 - only a policy naming rule files needs it

        return rule_file_rules(folder / name)

    return SpillPolicy.from_toml(
        text, token_counter=token_counter, rule_loader=rules_of
    )
