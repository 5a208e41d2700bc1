"""Our entries in a client's JSON settings file: added, found, removed.

Claude Code and Gemini CLI keep hooks as `hooks.<Event>` lists of matcher
groups `{"matcher": …, "hooks": [{"type": "command", "command": …}]}`;
Cursor as `hooks.<event>` lists of flat entries `{"command": …, "matcher": …}`.
An entry is ours when its command runs `spillvault hook run <client>`;
everything else in the file is kept as it was, in order.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from spillvault.adapters.hooks.client import HookConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


def load_settings(text: str | None, what: str) -> dict[str, Any]:
    """Parse a settings file; an empty or missing one is `{}`; refuse anything else."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as error:
        msg = f"{what} is not valid JSON ({error}); left untouched"
        raise HookConfigError(msg) from None
    if not isinstance(data, dict):
        msg = f"{what} does not hold a JSON object; left untouched"
        raise HookConfigError(msg)
    if not isinstance(data.get("hooks", {}), dict):
        msg = f"{what}: `hooks` is not an object; left untouched"
        raise HookConfigError(msg)
    return data


def dump_settings(data: dict[str, Any]) -> str:
    """Return settings as the clients write them: two-space JSON, a final newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def is_ours(command: object, client: str) -> bool:
    """Tell whether a hook command line runs `spillvault hook run <client>`."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    for i, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == "spillvault" and words[i + 1 : i + 4][:3] == [
            "hook",
            "run",
            client,
        ]:
            return True
    return False


def matcher_group(
    matcher: str, command: Sequence[str], timeout: int, **extra: object
) -> dict[str, Any]:
    """Return a matcher group running `command` (Claude Code, Codex, Gemini CLI)."""
    handler = {**extra, "type": "command", "command": shlex.join(command)}
    return {"matcher": matcher, "hooks": [{**handler, "timeout": timeout}]}


def group_commands(data: dict[str, Any], client: str) -> dict[str, str]:
    """Return `client`'s command line per event, in matcher-group settings."""
    found: dict[str, str] = {}
    for event, groups in (data.get("hooks") or {}).items():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for handler in handlers if isinstance(handlers, list) else []:
                command = handler.get("command") if isinstance(handler, dict) else None
                if isinstance(command, str) and is_ours(command, client):
                    found[event] = command
    return found


def group_without_ours(client: str) -> Callable[[object], object | None]:
    """Return a `strip` for matcher groups: the group without `client`'s handlers."""

    def strip(group: object) -> object | None:
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(group, dict) or not isinstance(handlers, list):
            return group
        kept = [
            handler
            for handler in handlers
            if not (
                isinstance(handler, dict) and is_ours(handler.get("command"), client)
            )
        ]
        if len(kept) == len(handlers):
            return group
        return {**group, "hooks": kept} if kept else None

    return strip


def _list_of(hooks: dict[str, object], event: str) -> list[object]:
    """Return an event's list of entries; refuse a value that is no list."""
    listed = hooks.get(event, [])
    if not isinstance(listed, list):
        msg = f"`hooks.{event}` is not a list; left untouched"
        raise HookConfigError(msg)
    return listed


def arranged(
    data: dict[str, Any],
    entries: Mapping[str, object],
    strip: Callable[[object], object | None],
) -> dict[str, Any]:
    """Return `data` with nothing of ours but `entries`, each where ours stood.

    `strip(entry)` returns an entry without our part (None when nothing of
    it is left). Each of `entries` takes the place of the first entry of its
    event that was wholly ours, else goes last: a client that keys anything
    by position (Codex's trust) keeps it. A list or `hooks` object only ours
    emptied goes; everything else keeps its place and order.
    """
    hooks: dict[str, object] = data.get("hooks") or {}
    result: dict[str, object] = {}
    placed: set[str] = set()
    for event, listed in hooks.items():
        if not isinstance(listed, list):  # a setting kept there by an older client
            result[event] = listed
            continue
        kept: list[object] = []
        for entry in listed:
            left = strip(entry)
            if left is not None:
                kept.append(left)
            elif event in entries and event not in placed:
                kept.append(entries[event])
                placed.add(event)
        if kept or not listed:
            result[event] = kept
    for event, entry in entries.items():
        if event not in placed:
            result[event] = [*_list_of(result, event), entry]
    if result or ("hooks" in data and not hooks):
        return {**data, "hooks": result}
    return {key: value for key, value in data.items() if key != "hooks"}


__all__ = [
    "arranged",
    "dump_settings",
    "group_without_ours",
    "is_ours",
    "load_settings",
    "matcher_group",
]
