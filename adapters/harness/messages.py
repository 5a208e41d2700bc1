"""Tool results in message histories (Anthropic Messages, OpenAI Chat).

The formats are the official SDKs' request shapes. Anthropic: assistant
`tool_use` blocks `{"type", "id", "name", "input"}` and user `tool_result`
blocks `{"type", "tool_use_id", "content", "is_error"?}`. OpenAI: assistant
`tool_calls` `{"id", "type": "function", "function": {"name", "arguments"}}`
and `{"role": "tool", "tool_call_id", "content"}` messages.

`gate_messages` also takes the SDKs' own objects (pydantic models), whole
messages or blocks, and returns them as plain dicts (see `sdk_objects`); the
other functions here take plain-dict histories.

Nothing here mutates its input: a rebuilt history is a new list; a message
that was changed or held SDK objects is a new dict (a deep copy); every other
message is the caller's own object.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from spillvault.adapters.harness.sdk_objects import plain_history
from spillvault.adapters.services.externalizer import text_of

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from spillvault.adapters.services.externalizer import (
        Arm,
        Content,
        GateOutcome,
        SessionExternalizer,
    )

Format = Literal["anthropic", "openai"]
Message = dict[str, Any]
Position = tuple[int, int | None]
FORMATS: tuple[Format, ...] = ("anthropic", "openai")


@dataclass(frozen=True)
class ToolResult:
    """One tool result of a history, located by message and block index."""

    message_index: int
    block_index: int | None
    tool_use_id: str
    tool_name: str
    content: Content
    is_error: bool

    @property
    def position(self) -> Position:
        """Return the (message index, block index) key `replace_tool_results` takes."""
        return (self.message_index, self.block_index)


def check_format(format: str) -> Format:  # noqa: A002 - SPEC's keyword
    """Return `format` if it is a supported history format, else raise ValueError."""
    if format == "anthropic":
        return "anthropic"
    if format == "openai":
        return "openai"
    msg = f"format must be 'anthropic' or 'openai', not {format!r}"
    raise ValueError(msg)


def iter_tool_results(
    messages: Sequence[Mapping[str, Any]],
    *,
    format: str,  # noqa: A002 - SPEC's keyword
) -> Iterator[ToolResult]:
    """Yield the tool results of a history in order, each with its tool's name.

    The name comes from the matching call earlier in the history; a result
    without one makes the history invalid for both APIs and raises ValueError.
    """
    fmt = check_format(format)
    names: dict[str, str] = {}
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            msg = f"message {index} is not a dict"
            raise TypeError(msg)
        if fmt == "anthropic":
            yield from _anthropic_results(index, message, names)
        else:
            yield from _openai_results(index, message, names)


def _anthropic_results(
    index: int, message: Mapping[str, Any], names: dict[str, str]
) -> Iterator[ToolResult]:
    blocks = message.get("content")
    if not isinstance(blocks, list):
        return
    for block_index, block in enumerate(blocks):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "tool_use" and message.get("role") == "assistant":
            names[str(block["id"])] = str(block["name"])
        elif kind == "tool_result":
            tool_use_id = str(block["tool_use_id"])
            yield ToolResult(
                index,
                block_index,
                tool_use_id,
                _name_of(names, tool_use_id, index),
                _content_of(block.get("content", ""), index),
                bool(block.get("is_error", False)),
            )


def _openai_results(
    index: int, message: Mapping[str, Any], names: dict[str, str]
) -> Iterator[ToolResult]:
    role = message.get("role")
    if role == "assistant":
        for call in message.get("tool_calls") or ():
            # A custom tool call carries its name under "custom", not "function".
            body = call.get("function") or call.get("custom") or {}
            names[str(call["id"])] = str(body.get("name", ""))
    elif role == "tool":
        tool_use_id = str(message["tool_call_id"])
        yield ToolResult(
            index,
            None,
            tool_use_id,
            _name_of(names, tool_use_id, index),
            _content_of(message.get("content", ""), index),
            is_error=False,
        )


def _name_of(names: Mapping[str, str], tool_use_id: str, index: int) -> str:
    try:
        return names[tool_use_id]
    except KeyError:
        msg = f"tool result {tool_use_id!r} at message {index} has no earlier call"
        raise ValueError(msg) from None


def _content_of(content: object, index: int) -> Content:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return content
    msg = (
        f"tool result content at message {index} must be a string or a list, "
        f"not {type(content).__name__}"
    )
    raise TypeError(msg)


def replace_tool_results(
    messages: Sequence[Mapping[str, Any]], replacements: Mapping[Position, Content]
) -> list[Message]:
    """Return a new history with the results at the given positions replaced."""
    by_message: dict[int, dict[int | None, Content]] = {}
    for (message_index, block_index), content in replacements.items():
        by_message.setdefault(message_index, {})[block_index] = content
    rebuilt: list[Message] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            msg = f"message {index} is not a dict"
            raise TypeError(msg)
        changes = by_message.get(index)
        if not changes:
            rebuilt.append(message)
            continue
        fresh = copy.deepcopy(message)
        for block_index, content in changes.items():
            target = fresh if block_index is None else fresh["content"][block_index]
            target["content"] = copy.deepcopy(content)
        rebuilt.append(fresh)
    return rebuilt


def gate_messages(
    messages: Sequence[object],
    *,
    format: str,  # noqa: A002 - SPEC's keyword
    externalizer: SessionExternalizer,
    arm: Arm = "model",
) -> tuple[list[Message], list[GateOutcome]]:
    """Apply the spill gate (S1) to every tool result of a history (S7.2).

    The messages are dicts or SDK objects. The outcomes are in result order; a
    result the gate changed gets the outcome's content, everything else stays
    as it was. A result mixing text and other blocks is gated by its text
    blocks, which a spill replaces by one preview block ahead of the others.
    """
    history = plain_history(messages, fmt=check_format(format))
    gated, outcomes = gate_results(
        history, format=format, externalizer=externalizer, arm=arm, skip=frozenset()
    )
    return gated, [outcome for _, outcome in outcomes]


def gate_results(
    messages: Sequence[Mapping[str, Any]],
    *,
    format: str,  # noqa: A002 - SPEC's keyword
    externalizer: SessionExternalizer,
    arm: Arm,
    skip: frozenset[str],
) -> tuple[list[Message], list[tuple[str, GateOutcome]]]:
    """Gate a plain history's results not in `skip`; (id, outcome) in order."""
    outcomes: list[tuple[str, GateOutcome]] = []
    replacements: dict[Position, Content] = {}
    # Listing first rejects a malformed history before anything is stored.
    for result in list(iter_tool_results(messages, format=format)):
        if result.tool_use_id in skip:
            continue
        outcome = _gate_result(result, externalizer=externalizer, arm=arm)
        outcomes.append((result.tool_use_id, outcome))
        if outcome.content is not result.content:
            replacements[result.position] = outcome.content
    return replace_tool_results(messages, replacements), outcomes


def _gate_result(
    result: ToolResult, *, externalizer: SessionExternalizer, arm: Arm
) -> GateOutcome:
    """Gate one tool result; one mixing text and other blocks by its text blocks.

    The gate leaves any content with a non-text block alone, yet an image must
    not keep a huge text beside it in context. So the text blocks are gated on
    their own (joined into one artifact, as an all-text result is) and, when
    spilled, the content becomes the preview block, then the other blocks
    unchanged in their order. The preview goes first because the text blocks
    have no single place left, and so the model reads the handle before the
    images, where an all-text result has its preview too. Only Anthropic
    results mix: an OpenAI tool message takes text parts only.
    """
    content = result.content
    blocks = [] if isinstance(content, str) else content
    texts = [block for block in blocks if block.get("type") == "text"]
    others = [block for block in blocks if block.get("type") != "text"]
    gated: Content = texts if texts and others else content
    outcome = externalizer.process(
        gated,
        result.tool_name,
        arm=arm,
        tool_use_id=result.tool_use_id,
        is_error=result.is_error,
    )
    if gated is content:
        return outcome
    if outcome.content is gated:
        return dataclasses.replace(outcome, content=content)
    assert isinstance(outcome.content, list)  # noqa: S101 - the gate keeps the shape
    return dataclasses.replace(outcome, content=[*outcome.content, *others])


__all__ = [
    "FORMATS",
    "Format",
    "Message",
    "Position",
    "ToolResult",
    "check_format",
    "gate_messages",
    "gate_results",
    "iter_tool_results",
    "replace_tool_results",
    "text_of",
]
