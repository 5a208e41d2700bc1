"""Load a spill policy from a TOML file (the domain parses text only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spillvault.domain.errors import SpillPolicyError
from spillvault.domain.policy import SpillPolicy, TokenCounter

if TYPE_CHECKING:
    from os import PathLike


def load_policy_file(
    path: str | PathLike[str], *, token_counter: TokenCounter | None = None
) -> SpillPolicy:
    """Read a TOML policy file; any problem is a SpillPolicyError naming it."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"invalid spill policy: cannot read {path!s}: {exc}"
        raise SpillPolicyError(msg) from exc
    return SpillPolicy.from_toml(text, token_counter=token_counter)
