"""The clients `spillvault hook` knows, each imported only when named."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from spillvault.adapters.hooks.client import HookClient

CLIENT_MODULES: Final = {
    "claude-code": "spillvault.adapters.hooks.claude_code",
    "codex": "spillvault.adapters.hooks.codex",
    "cursor": "spillvault.adapters.hooks.cursor",
    "gemini": "spillvault.adapters.hooks.gemini",
    "opencode": "spillvault.adapters.hooks.opencode",
    "pi": "spillvault.adapters.hooks.pi",
}


class UnknownClientError(ValueError):
    """No client by that name."""


def client_named(name: str) -> HookClient:
    """Return the client called `name`."""
    module = CLIENT_MODULES.get(name)
    if module is None:
        msg = f"unknown client {name!r}; known: {', '.join(sorted(CLIENT_MODULES))}"
        raise UnknownClientError(msg)
    client: HookClient = import_module(module).CLIENT
    return client


__all__ = ["CLIENT_MODULES", "UnknownClientError", "client_named"]
